"""imgbuild plan: the stage graph, each step after ARG expansion, the cache
key inputs of RUN and the outputs, printed without running anything.
The expected text below was written by hand from the recipe."""
import json

from conftest import imgbuild

RECIPE = """\
ARG REG=mirror.example:5000
ARG BASE=${REG}/debian:bookworm
FROM ${BASE} AS build
ARG VERSION=1.0
ENV PREFIX=/opt/app-${VERSION}
WORKDIR /src
COPY src/ ./
RUN --mount=type=cache,target=/root/.cache make PREFIX="$PREFIX" VERSION=$VERSION
OUTPUT type=local,dest=dist-${VERSION},src=/src/out

FROM build AS test
RUN make check

FROM ${BASE} AS client
ARG VERSION
COPY --from=build /src/out/app-${VERSION}.tar /opt/
CMD ["/opt/app"]
OUTPUT type=image,name=app:${VERSION}
"""

EXPECTED = """\
recipe: plan.recipe
target: stage 2 client
platform: linux/amd64
build args: VERSION=2.0
global ARG REG=mirror.example:5000
global ARG BASE=mirror.example:5000/debian:bookworm

stage 0 build
  from: image mirror.example:5000/debian:bookworm
  depends on: none
  line 4: ARG VERSION=2.0
  line 5: ENV PREFIX=/opt/app-2.0
  line 6: WORKDIR /src
  line 7: COPY src/ ./
  line 8: RUN --mount=type=cache,target=/root/.cache make PREFIX="/opt/app-2.0" VERSION=2.0
    args: VERSION=2.0
  output: type=local dest=dist-2.0 src=/src/out

stage 1 test: skipped (not needed)

stage 2 client
  from: image mirror.example:5000/debian:bookworm
  depends on: 0 build
  line 15: ARG VERSION=2.0
  line 16: COPY --from=build /src/out/app-2.0.tar /opt/
  line 17: CMD ["/opt/app"]
  output: type=image name=app:2.0
"""


def plan(tmp_path, *args):
    (tmp_path / "plan.recipe").write_text(RECIPE)
    return imgbuild("plan", "plan.recipe", *args, store=tmp_path / "store", cwd=tmp_path)


def test_plan_text_is_pinned(tmp_path):
    r = plan(tmp_path, "--build-arg", "VERSION=2.0", "--platform", "linux/amd64")
    assert r.rc == 0, r
    assert r.out == EXPECTED
    # nothing was pulled, stored or made: not even the store directory
    assert not (tmp_path / "store").exists()
    assert not (tmp_path / "dist-2.0").exists()


def test_plan_target_and_defaults(tmp_path):
    r = plan(tmp_path, "--target", "test")
    assert r.rc == 0, r
    # --target: that stage and what it reads; OUTPUT stages elsewhere are not added
    assert "target: stage 1 test\n" in r.out
    assert "stage 1 test\n  from: stage 0 build\n  depends on: 0 build\n" \
           "  line 12: RUN make check\n    args: (none)\n" in r.out
    assert "stage 2 client: skipped (not needed)\n" in r.out
    # the ARG's default, with no --build-arg
    assert "  line 5: ENV PREFIX=/opt/app-1.0\n" in r.out


def test_plan_json(tmp_path):
    r = plan(tmp_path, "--json", "--build-arg", "VERSION=3", "--build-arg", "UNUSED=1")
    assert r.rc == 0, r
    p = json.loads(r.out)
    assert p["target"] == {"index": 2, "name": "client"}
    assert p["global_args"] == {"REG": "mirror.example:5000",
                                "BASE": "mirror.example:5000/debian:bookworm"}
    assert [s["needed"] for s in p["stages"]] == [True, False, True]
    build, _, client = p["stages"]
    assert build["base"] == {"image": "mirror.example:5000/debian:bookworm"}
    run = build["steps"][4]
    assert run["instruction"] == "RUN" and run["line"] == 8
    assert run["command"] == 'make PREFIX="$PREFIX" VERSION=$VERSION'  # what the key holds
    assert run["expanded"] == 'make PREFIX="/opt/app-3" VERSION=3'
    assert run["flags"] == ["--mount=type=cache,target=/root/.cache"]
    assert run["args"] == {"VERSION": "3"}
    assert run["shell"] == ["/bin/sh", "-c"]
    assert build["outputs"] == [{"line": 9, "type": "local", "dest": "dist-3", "src": "/src/out"}]
    assert client["depends_on"] == [0]
    assert client["steps"][1]["sources"] == ["/src/out/app-3.tar"]
    assert client["steps"][1]["dest"] == "/opt/"
    assert client["outputs"][0]["name"] == "app:3"
    assert p["unused_build_args"] == ["UNUSED"]


def test_plan_errors(tmp_path):
    r = plan(tmp_path, "--target", "nope")
    assert r.rc == 1 and r.out == ""
    assert r.err.strip() == "imgbuild: plan.recipe: no stage named 'nope'"
    r = imgbuild("plan", store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 2 and "plan: missing RECIPE" in r.err
    r = imgbuild("plan", "a", "b", store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 2 and "unexpected argument 'b'" in r.err
    r = imgbuild("plan", "x.recipe", "--platform", "nonsense", store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 2 and "--platform" in r.err
    (tmp_path / "bad.recipe").write_text("FROM a\nRUN x\nFROB y\n")
    r = imgbuild("plan", "bad.recipe", store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 1
    assert r.err.strip() == "imgbuild: bad.recipe:3:1: unknown instruction 'FROB' (did you mean FROM?)"


def test_plan_keeps_what_the_base_image_sets(tmp_path):
    """The plan reads no image config: an ENV value naming a variable the
    recipe does not set (the base image's PATH) shows it as written, and
    so does a RUN that reads it, instead of expanding it to nothing."""
    (tmp_path / "env.recipe").write_text(
        "FROM scratch\nARG TOOLS=/opt/tools\nENV PATH=${TOOLS}/bin:${PATH} EMPTY=${NOT_SET:-d}\n"
        'RUN echo "$PATH" "$EMPTY"\n')
    r = imgbuild("plan", "env.recipe", "--json", store=tmp_path / "store", cwd=tmp_path)
    assert r.rc == 0, r
    env, run = json.loads(r.out)["stages"][0]["steps"][1:3]
    assert env["env"] == {"PATH": "/opt/tools/bin:${PATH}", "EMPTY": "${NOT_SET:-d}"}, env
    assert run["expanded"] == 'echo "/opt/tools/bin:${PATH}" "${NOT_SET:-d}"', run
