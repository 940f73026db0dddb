"""imgbuild build --matrix / plan --matrix: the combinations' order, the
shared cache, OUTPUT dests made distinct by ARG expansion, the summary,
what happens when a combination fails, and the option's errors.

The recipe is FROM scratch with COPY steps only (no base image, no RUN),
so the matrix runs in a second; the expected texts are written by hand
from the recipe below and the order --matrix promises (docs/cli.md)."""
import json
import re

from conftest import imgbuild, tiny_wheel, untimed

SECONDS = re.compile(r"(: (?:ok|FAILED)) in \d+\.\d s")


def digest_of(tmp_path, name):
    """The manifest digest the store gives `name` (imgbuild inspect)."""
    return json.loads(imgbuild("inspect", name, store=tmp_path / "store").out)["digest"]

RECIPE = """\
FROM scratch AS wheels
COPY shared.txt /shared.txt
ARG NAME=alpha
ARG VER=1.0
COPY wheels/${NAME}-${VER}-py3-none-any.whl /out/
OUTPUT type=local,dest=dist/${NAME}-${VER},src=/out
OUTPUT type=image,name=matrix-test:${NAME}-${VER}
"""

COMBOS = [("alpha", "1.0"), ("alpha", "2.0"), ("beta", "1.0"), ("beta", "2.0")]


def make_context(tmp_path):
    (tmp_path / "m.recipe").write_text(RECIPE)
    (tmp_path / "shared.txt").write_text("in every combination\n")
    (tmp_path / "wheels").mkdir()
    for name, ver in COMBOS:
        tiny_wheel(tmp_path / "wheels", name, ver)


def build(tmp_path, *args):
    return imgbuild("build", "m.recipe", *args, store=tmp_path / "store", cwd=tmp_path)


def parts(err):
    """stderr cut at the per-combination headers: {header: text}."""
    out = {}
    for chunk in err.split("==> matrix ")[1:]:
        head, _, rest = chunk.partition("\n")
        out[head] = rest
    return out


def test_matrix_builds_each_combination_in_order_sharing_the_cache(tmp_path):
    make_context(tmp_path)
    r = build(tmp_path, "--matrix", "NAME=alpha,beta", "--matrix", "VER=1.0,2.0",
              "--matrix", "UNUSED=z")
    assert r.rc == 0, r
    # first --matrix slowest, values in the order given
    heads = [f"{i + 1}/4: NAME={n} VER={v} UNUSED=z" for i, (n, v) in enumerate(COMBOS)]
    p = parts(r.err)
    assert list(p) == heads
    # one store: the step before the matrix ARGs runs once, then is a hit
    assert "COPY shared.txt /shared.txt\n" in p[heads[0]]
    for h in heads[1:]:
        assert "COPY shared.txt /shared.txt CACHED\n" in p[h]
    # the recipe never declares UNUSED: the usual warning, per combination
    assert r.err.count("build arg UNUSED was not consumed by any ARG") == 4
    # each combination's OUTPUT dest expanded with its own values
    for n, v in COMBOS:
        got = sorted(x.name for x in (tmp_path / "dist" / f"{n}-{v}").iterdir())
        assert got == [f"{n}-{v}-py3-none-any.whl"]
    expected = "matrix summary: 4 of 4 combinations built, 0 failed\n"
    for i, (n, v) in enumerate(COMBOS):
        expected += (f"matrix {i + 1}/4: NAME={n} VER={v} UNUSED=z: ok\n"
                     f"  wheel dist/{n}-{v}/{n}-{v}-py3-none-any.whl\n"
                     f"  image matrix-test:{n}-{v} "
                     f"{digest_of(tmp_path, f'docker.io/library/matrix-test:{n}-{v}')}\n")
    # every status line says how long its combination took
    assert len(SECONDS.findall(r.out)) == 4
    assert untimed(r.out) == expected


def test_matrix_keeps_going_after_a_failed_combination(tmp_path):
    make_context(tmp_path)
    r = build(tmp_path, "--matrix", "NAME=gamma,alpha", "--build-arg", "VER=2.0")
    assert r.rc == 1, r
    out = untimed(r.out)
    assert out.startswith("matrix summary: 1 of 2 combinations built, 1 failed\n"
                          "matrix 1/2: NAME=gamma: FAILED: m.recipe:5: COPY: wheels/gamma-2.0-py3-none-any.whl")
    assert out.endswith("matrix 2/2: NAME=alpha: ok\n"
                        "  wheel dist/alpha-2.0/alpha-2.0-py3-none-any.whl\n"
                        "  image matrix-test:alpha-2.0 "
                        f"{digest_of(tmp_path, 'docker.io/library/matrix-test:alpha-2.0')}\n")
    assert "imgbuild: matrix NAME=gamma: m.recipe:5: COPY: wheels/gamma-2.0-py3-none-any.whl" in r.err
    assert r.err.rstrip().endswith("imgbuild: matrix: 1 of 2 combinations failed")
    assert (tmp_path / "dist/alpha-2.0/alpha-2.0-py3-none-any.whl").is_file()
    assert not (tmp_path / "dist/gamma-2.0").exists()


def test_matrix_fail_fast_stops_at_the_first_failure(tmp_path):
    make_context(tmp_path)
    r = build(tmp_path, "--fail-fast", "--matrix", "NAME=gamma,alpha", "--matrix", "VER=1.0")
    assert r.rc == 1, r
    lines = untimed(r.out).splitlines()
    assert lines[0] == "matrix summary: 0 of 2 combinations built, 1 failed"
    assert lines[1].startswith("matrix 1/2: NAME=gamma VER=1.0: FAILED: ")
    assert lines[2] == "matrix 2/2: NAME=alpha VER=1.0: not built (--fail-fast)"
    assert len(lines) == 3
    assert "==> matrix 2/2" not in r.err
    assert not (tmp_path / "dist").exists()


def test_matrix_option_errors(tmp_path):
    make_context(tmp_path)
    cases = [
        (["--matrix", "NAME"], "--matrix NAME: expected NAME=VALUE[,VALUE...]"),
        (["--matrix", "NAME="], "--matrix NAME=: no values (expected NAME=VALUE[,VALUE...])"),
        (["--matrix", "NAME=a,,b"], "--matrix NAME=a,,b: an empty value"),
        (["--matrix", "NAME=a,"], "--matrix NAME=a,: an empty value"),
        (["--matrix", "NAME=a,a"], "--matrix NAME=a,a: value 'a' listed twice"),
        (["--matrix", "2X=a"], "--matrix 2X=a: '2X' is not a build-arg name"),
        (["--matrix", "NAME=a", "--matrix", "NAME=b"],
         "--matrix NAME=b: NAME is given by an earlier --matrix"),
        (["--matrix", "NAME=a,b", "--build-arg", "NAME=c"],
         "--build-arg NAME=c: NAME is a --matrix argument"),
        (["--build-arg", "VER=1", "--fail-fast"], "build: --fail-fast goes with --matrix"),
    ]
    for args, msg in cases:
        r = build(tmp_path, *args)
        assert (r.rc, r.out, r.err) == (2, "", f"imgbuild: {msg}\nTry 'imgbuild --help'.\n"), args
    r = imgbuild("plan", "m.recipe", "--matrix", "VER=", store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 2 and r.err.startswith("imgbuild: --matrix VER=: no values"), r
    # nothing was built
    assert not (tmp_path / "dist").exists()


def test_plan_matrix(tmp_path):
    make_context(tmp_path)
    r = imgbuild("plan", "m.recipe", "--matrix", "VER=1.0,2.0", "--build-arg", "NAME=beta",
                 store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 0, r
    one, two = r.out.split("\nmatrix 2/2: VER=2.0\n\n")
    assert one.startswith("matrix 1/2: VER=1.0\n\nrecipe: m.recipe\n")
    assert "build args: NAME=beta VER=1.0\n" in one
    assert "  output: type=local dest=dist/beta-1.0 src=/out\n" in one
    assert two.startswith("recipe: m.recipe\n")
    assert "  line 5: COPY wheels/beta-2.0-py3-none-any.whl /out/\n" in two
    assert "  output: type=image name=matrix-test:beta-2.0\n" in two
    r = imgbuild("plan", "m.recipe", "--json", "--matrix", "NAME=alpha,beta", "--matrix", "VER=2.0",
                 store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 0, r
    plans = json.loads(r.out)
    assert [p["matrix"] for p in plans] == [{"NAME": "alpha", "VER": "2.0"},
                                            {"NAME": "beta", "VER": "2.0"}]
    assert [p["plan"]["stages"][0]["outputs"][0]["dest"] for p in plans] == \
           ["dist/alpha-2.0", "dist/beta-2.0"]
    # nothing stored by a plan
    assert not (tmp_path / "store").exists()


SHARED_RECIPE = """\
FROM scratch AS base
COPY shared.txt /shared.txt
ARG NAME=alpha
COPY wheels/${NAME}-1.0-py3-none-any.whl /out/
OUTPUT type=local,dest=dist/${NAME},src=/out

FROM scratch AS final
COPY other.txt /other.txt
COPY --from=base /out/ /out/
OUTPUT type=image,name=shared-test:latest
"""


def test_shared_only_builds_what_every_combination_shares(tmp_path):
    make_context(tmp_path)
    (tmp_path / "s.recipe").write_text(SHARED_RECIPE)
    (tmp_path / "other.txt").write_text("also shared\n")
    r = imgbuild("build", "s.recipe", "--matrix", "NAME=alpha,beta", "--shared-only",
                 store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 0, r
    # each stage stops before the first instruction a matrix value reaches:
    # the ARG itself, and a COPY --from a stage that stopped
    assert "[base] --shared-only: stopped before line 3 (its ARG depends on a --matrix " \
           "argument)" in r.err
    assert "[final] --shared-only: stopped before line 9 (its COPY depends on a --matrix " \
           "argument)" in r.err
    assert "COPY shared.txt /shared.txt\n" in r.err and "COPY other.txt /other.txt\n" in r.err
    assert "wheels/" not in r.err
    assert "the steps every combination shares (0 steps cached, 2 run)" in r.err
    assert "not consumed" not in r.err
    # no outputs, no image
    assert not (tmp_path / "dist").exists()
    assert imgbuild("inspect", "shared-test:latest", store=tmp_path / "store").rc == 1
    # the matrix then finds both steps in the cache, in every combination
    m = imgbuild("build", "s.recipe", "--matrix", "NAME=alpha,beta", store=tmp_path / "store",
                 cwd=tmp_path)
    assert m.rc == 0, m
    assert m.err.count("COPY shared.txt /shared.txt CACHED\n") == 2
    assert m.err.count("COPY other.txt /other.txt CACHED\n") == 2


def test_shared_only_follows_global_args_that_read_an_axis(tmp_path):
    (tmp_path / "shared.txt").write_text("x\n")
    (tmp_path / "t.recipe").write_text(
        "ARG NAME=a\n"
        "ARG TAG=v${NAME}\n"
        "FROM scratch\n"
        "COPY shared.txt /s\n"
        "ARG TAG\n"
        "COPY shared.txt /t-${TAG}\n")
    r = imgbuild("build", "t.recipe", "--matrix", "NAME=a,b", "--shared-only",
                 store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 0, r
    assert "stopped before line 5 (its ARG depends on a --matrix argument)" in r.err
    assert "COPY shared.txt /s\n" in r.err and "/t-" not in r.err
