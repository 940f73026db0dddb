"""`make install`: the binary, man pages cut from docs/cli.md, bash
completion and the docs, under DESTDIR and PREFIX; and what a user then
does with them: `man imgbuild-build`, and tab completion of commands,
options, option values and stored image names."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import IMGBUILD, ROOT, imgbuild

PREFIX = "/usr"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`make install` into a DESTDIR, as this user (the man pages are made
    in a directory of the test's: the checkout may not be writable)."""
    d = tmp_path_factory.mktemp("install")
    destdir, man_dir = d / "root", d / "man"
    bindir = IMGBUILD.parent
    # -o: the binary under test is taken as it is, never rebuilt here
    r = subprocess.run(["make", "-C", str(ROOT), "-o", "all", "-o", str(IMGBUILD),
                        f"BIN={bindir}", f"DESTDIR={destdir}", f"PREFIX={PREFIX}",
                        f"MAN_DIR={man_dir}", "install"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return destdir


def commands():
    """The commands `imgbuild --help` lists (the code's usage text)."""
    out = subprocess.run([str(IMGBUILD), "--help"], capture_output=True, text=True).stdout
    block = out.split("Commands:\n", 1)[1].split("\nGlobal options", 1)[0]
    return sorted({re.sub(r"[][]", "", l.split()[0]) for l in block.splitlines()
                   if re.match(r"^  [^ ]", l)})


def man(destdir, page):
    env = dict(os.environ, MANPATH=str(destdir / PREFIX.lstrip("/") / "share/man"),
               MANWIDTH="80", LANG="C.UTF-8")
    return subprocess.run(["man", "--warnings", page], capture_output=True, text=True, env=env)


def test_install_puts_each_part_in_its_place(installed):
    root = installed / PREFIX.lstrip("/")
    binary = root / "bin/imgbuild"
    assert binary.read_bytes() == IMGBUILD.read_bytes()
    assert os.stat(binary).st_mode & 0o777 == 0o755
    version = subprocess.run([str(binary), "version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("imgbuild ")
    pages = sorted(p.name for p in (root / "share/man/man1").iterdir())
    assert pages == sorted(["imgbuild.1"] + [f"imgbuild-{c}.1" for c in commands()])
    completion = root / "share/bash-completion/completions/imgbuild"
    assert completion.read_bytes() == (ROOT / "completions/imgbuild.bash").read_bytes()
    docs = root / "share/doc/imgbuild"
    for f in ["README.md", "cli.md", "recipe.md", "security.md", "design.md"]:
        src = ROOT / (f if f == "README.md" else f"docs/{f}")
        assert (docs / f).read_bytes() == src.read_bytes(), f


def test_man_pages_render_from_the_cli_reference(installed):
    cli = (ROOT / "docs/cli.md").read_text()
    for c in commands():
        r = man(installed, f"imgbuild-{c}")
        assert r.returncode == 0, (c, r.stderr)
        # roff read none of the text as a request (a line starting with '.')
        assert not re.search(r"macro .* not defined|error", r.stderr), (c, r.stderr)
        text = " ".join(r.stdout.split())
        assert text.startswith(f"imgbuild-{c}(1)"), c
        assert f"NAME imgbuild-{c} - " in text, c
        assert "DESCRIPTION" in text and "SEE ALSO imgbuild(1)" in text, c
        # the page is the reference's section: its first sentence is there
        section = cli.split(f"\n## {c}\n", 1)[1].split("\n## ", 1)[0]
        prose = next(p for p in section.split("\n\n") if p and not p.startswith("    "))
        first = re.sub(r"[`*]", "", " ".join(prose.split()[:6]))
        assert first in text, (c, first)
    build = " ".join(man(installed, "imgbuild-build").stdout.split())
    assert "SYNOPSIS imgbuild [build] RECIPE [--build-arg K=V]" in build
    assert "Build matrix" in build and "--no-cache" in build
    top = " ".join(man(installed, "imgbuild").stdout.split())
    assert "SYNOPSIS imgbuild [GLOBAL OPTIONS] COMMAND [ARGS]" in top
    assert "Coming from docker or buildah" in top and "--store DIR" in top
    for c in commands():
        assert f"imgbuild-{c}(1)" in top, c
    assert f"{PREFIX}/share/doc/imgbuild" in top


def complete(destdir, line, env=None):
    """What bash offers for the line (cursor at its end), with the
    installed completion and the installed binary first on PATH."""
    script = (f"source {destdir}/{PREFIX.lstrip('/')}/share/bash-completion/completions/imgbuild\n"
              'COMP_LINE=$1; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<< "$1"\n'
              "COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _imgbuild\n"
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    e = dict(os.environ, PATH=f"{destdir}/{PREFIX.lstrip('/')}/bin:{os.environ['PATH']}")
    e.update(env or {})
    r = subprocess.run(["bash", "-c", script, "bash", line], capture_output=True, text=True,
                       env=e, cwd=destdir)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_completion_of_commands_options_and_values(installed):
    assert complete(installed, "imgbuild ") == commands()
    assert complete(installed, "imgbuild pu") == ["pull", "push"]
    assert complete(installed, "imgbuild --store /x bu") == ["build"]
    # a command's own options, and the global ones after it
    assert complete(installed, "imgbuild build --build-a") == ["--build-arg"]
    assert complete(installed, "imgbuild build --no-cache-") == ["--no-cache-filter"]
    assert complete(installed, "imgbuild run --entry") == ["--entrypoint"]
    assert "--store" in complete(installed, "imgbuild images --")
    assert "--noheading" in complete(installed, "imgbuild images --")
    assert "--build-arg" not in complete(installed, "imgbuild images --")
    # values: the usage text's a|b|c, the global modes, both spellings
    assert complete(installed, "imgbuild run --network ") == ["host", "none"]
    assert complete(installed, "imgbuild build --compression z") == ["zstd"]
    assert complete(installed, "imgbuild --userns ") == ["auto", "root", "map", "single"]
    assert complete(installed, "imgbuild build --progress=pl") == ["plain"]
    assert complete(installed, "imgbuild wheel ") == ["audit", "repair"]
    # files where the usage says FILE, DIR or RECIPE
    (installed / "app.recipe").write_text("FROM scratch\n")
    assert complete(installed, "imgbuild build app.re") == ["app.recipe"]
    assert complete(installed, "imgbuild app.re") == ["app.recipe"]


def test_completion_of_image_names(installed, base_image, tmp_path):
    store = tmp_path / "store"
    # a store that does not exist: no names, and completion does not make it
    assert complete(installed, f"imgbuild --store {store} run ") == []
    assert not store.exists()
    r = imgbuild("pull", base_image, store=store)
    assert r.rc == 0, r
    registry, rest = base_image.split("/", 1)
    repo, tag = rest.rsplit(":", 1)
    # bash breaks words at ':': it is given the part after the last one
    host = registry.split(":")[0]
    got = complete(installed, f"imgbuild --store {store} run {host}:")
    assert got == [base_image[len(host) + 1:]]
    got = complete(installed, f"imgbuild --store={store} inspect {registry}/{repo}:")
    assert got == [tag]
    got = complete(installed, f"imgbuild inspect {registry}/{repo[:2]}",
                   env={"IMGBUILD_STORE": str(store)})
    assert got == [base_image[len(host) + 1:]]
    listing = imgbuild("images", "--noheading", store=store)
    assert listing.rc == 0 and listing.out.split()[0] == base_image
    assert "NAME" not in listing.out


def test_uninstall_removes_what_install_put(installed, tmp_path):
    dest = tmp_path / "again"
    shutil.copytree(installed, dest, symlinks=True)
    r = subprocess.run(["make", "-C", str(ROOT), "-o", "all", f"BIN={IMGBUILD.parent}",
                        f"DESTDIR={dest}", f"PREFIX={PREFIX}", "uninstall"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    left = [p for p in dest.rglob("*") if p.is_file()]
    assert left == [dest / "app.recipe"] or left == [], left
