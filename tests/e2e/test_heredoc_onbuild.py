"""Heredocs (RUN <<EOF, a #! script, a heredoc fed to a command, COPY <<EOF
with and without expansion, several on one line, <<- tab stripping) and
ONBUILD (recorded in the config, run after FROM in the next build, not
inherited), built on the Debian base image; files asserted byte for byte."""
import json

from conftest import imgbuild, write


def run_cat(store, ref, *paths):
    r = imgbuild("run", ref, "--", "cat", *paths, store=store)
    assert r.rc == 0, r
    return r.out


RECIPE = """FROM {base} AS base
ARG WHO=world
COPY <<EOF /greeting.txt
hello ${{WHO}}
EOF
COPY <<'RAW' <<two.txt /files/
raw $WHO
RAW
second
two.txt
RUN <<EOF
mkdir -p /out
echo "script ran as $0" > /out/plain
EOF
RUN <<EOF
#!/usr/bin/perl
open(my $f, ">", "/out/py") or die; print $f "perl $0\\n";
EOF
RUN cat > /out/fed <<EOF && cat > /out/tabs <<-END
fed ${{WHO}}
EOF
\t\tindented
\tEND
ONBUILD RUN echo "triggered in $(pwd)" > /triggered
ONBUILD LABEL org.example.child=yes
OUTPUT type=image,name=heredoc-base:latest

FROM base AS child
WORKDIR /w
OUTPUT type=image,name=heredoc-child:latest
"""


def test_heredocs_and_onbuild(tmp_path, registry, base_image):
    store = tmp_path / "store"
    ctx = tmp_path / "ctx"
    recipe = write(ctx / "r.recipe", RECIPE.format(base=base_image))
    r = imgbuild("build", recipe, "--build-arg", "WHO=imgbuild", store=store)
    assert r.rc == 0, r
    assert run_cat(store, "heredoc-base:latest", "/greeting.txt") == "hello imgbuild\n"
    assert run_cat(store, "heredoc-base:latest", "/files/RAW") == "raw $WHO\n"
    assert run_cat(store, "heredoc-base:latest", "/files/two.txt") == "second\n"
    # a body without #! runs with the shell (sh -c: $0 is sh)
    assert run_cat(store, "heredoc-base:latest", "/out/plain") == "script ran as /bin/sh\n"
    # with #!, as a file at /dev/pipes/NAME, by its interpreter
    assert run_cat(store, "heredoc-base:latest", "/out/py") == "perl /dev/pipes/EOF\n"
    # heredocs fed to commands: the shell expands an unquoted one itself
    # (ARGs are the RUN's environment)
    assert run_cat(store, "heredoc-base:latest", "/out/fed") == "fed imgbuild\n"
    assert run_cat(store, "heredoc-base:latest", "/out/tabs") == "indented\n"
    base_cfg = json.loads(imgbuild("inspect", "heredoc-base:latest", store=store).out)["config"]
    assert base_cfg["config"]["OnBuild"] == [
        'RUN echo "triggered in $(pwd)" > /triggered', "LABEL org.example.child=yes"]
    # the base's own steps did not run its triggers
    r = imgbuild("run", "heredoc-base:latest", "--", "test", "-e", "/triggered", store=store)
    assert r.rc == 1
    # the child ran them right after FROM (before its WORKDIR), in order
    assert run_cat(store, "heredoc-child:latest", "/triggered") == "triggered in /\n"
    child_cfg = json.loads(imgbuild("inspect", "heredoc-child:latest", store=store).out)["config"]
    assert child_cfg["config"]["Labels"]["org.example.child"] == "yes"
    assert "OnBuild" not in child_cfg["config"]
    # a rebuild takes everything from the cache, heredoc contents included
    r = imgbuild("build", recipe, "--build-arg", "WHO=imgbuild", store=store)
    assert r.rc == 0, r
    assert "(0 steps cached" not in r.err and " run)" in r.err and ", 0 run)" in r.err, r.err
    # a changed heredoc body reruns its step
    recipe.write_text(recipe.read_text().replace("second\n", "SECOND\n"))
    r = imgbuild("build", recipe, "--build-arg", "WHO=imgbuild", store=store)
    assert r.rc == 0, r
    assert "COPY <<'RAW' <<two.txt /files/\n" in r.err + "\n", r.err
    assert run_cat(store, "heredoc-base:latest", "/files/two.txt") == "SECOND\n"


def test_onbuild_errors(tmp_path, registry, base_image):
    store = tmp_path / "store"
    for text, msg in [("ONBUILD FROM x", "FROM isn't allowed as an ONBUILD trigger"),
                      ("ONBUILD ONBUILD RUN x", "Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed")]:
        recipe = write(tmp_path / "r.recipe", f"FROM {base_image}\n{text}\n")
        r = imgbuild("build", recipe, store=store)
        assert r.rc != 0
        assert msg in r.err, r.err
    # a trigger that fails names the FROM line and the trigger
    recipe = write(tmp_path / "b.recipe", f"""FROM {base_image} AS b
ONBUILD RUN exit 3
FROM b
RUN true
""")
    r = imgbuild("build", recipe, store=store)
    assert r.rc != 0
    assert "b.recipe:3: ONBUILD trigger 'RUN exit 3' of the base image" in r.err, r.err
    assert "exit status 3" in r.err
