"""Automatic platform ARGs (TARGETPLATFORM & co. in FROM and, declared, in a
stage), build --platform, the predefined proxy ARGs (in RUN's environment,
not in the history nor the cache key), RUN --mount targets relative to
WORKDIR, HOME from /etc/passwd, and `imgbuild run --entrypoint`; what the
steps saw is read back from files in the image."""
import json

from conftest import imgbuild, write


def cat(store, ref, path):
    r = imgbuild("run", ref, "--", "cat", path, store=store)
    assert r.rc == 0, r
    return r.out


def inspect(store, ref):
    r = imgbuild("inspect", ref, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)


PLATFORM = """ARG TARGETARCH
FROM --platform=$BUILDPLATFORM {base} AS build
ARG TARGETPLATFORM
ARG TARGETOS TARGETARCH TARGETVARIANT BUILDOS
RUN echo "t=$TARGETPLATFORM os=$TARGETOS arch=$TARGETARCH v=[$TARGETVARIANT] b=$BUILDOS u=[$BUILDARCH]" > /p.txt
FROM build
ARG TARGETARCH
RUN echo "global=$TARGETARCH" > /g.txt
"""


def test_platform_args(tmp_path, base_image):
    store = tmp_path / "store"
    write(tmp_path / "ctx/R", PLATFORM.format(base=base_image))
    r = imgbuild("build", tmp_path / "ctx/R", "-t", "plat:1", store=store)
    assert r.rc == 0, r
    # BUILDARCH was not declared in the stage: empty there, as in BuildKit
    assert cat(store, "plat:1", "/p.txt") == \
        "t=linux/amd64 os=linux arch=amd64 v=[] b=linux u=[]\n"
    assert cat(store, "plat:1", "/g.txt") == "global=amd64\n"
    # --platform names the target: the same host platform gives the same image
    r2 = imgbuild("build", tmp_path / "ctx/R", "--platform", "linux/amd64", "-t", "plat:2",
                  store=store)
    assert r2.rc == 0, r2
    assert inspect(store, "plat:2")["config"]["architecture"] == "amd64"
    assert inspect(store, "plat:1")["digest"] == inspect(store, "plat:2")["digest"]


def test_foreign_platform_refuses_run(tmp_path, base_image):
    """--platform linux/arm64: FROM pulls that platform (the test image has
    only amd64, so the pull names what is missing), never runs amd64."""
    store = tmp_path / "store"
    write(tmp_path / "ctx/R", f"FROM {base_image}\nRUN true\n")
    r = imgbuild("build", tmp_path / "ctx/R", "--platform", "linux/arm64", store=store)
    assert r.rc != 0
    assert "arm64" in r.err, r
    bad = imgbuild("build", tmp_path / "ctx/R", "--platform", "amd64", store=store)
    assert bad.rc == 2
    assert "--platform: expected OS/ARCH[/VARIANT], got 'amd64'" in bad.err


PROXY = """FROM {base}
RUN echo "proxy=[$HTTP_PROXY] [$no_proxy]" > /proxy.txt
"""


def test_proxy_args_reach_run_not_history_nor_key(tmp_path, base_image):
    store = tmp_path / "store"
    write(tmp_path / "ctx/R", PROXY.format(base=base_image))
    r = imgbuild("build", tmp_path / "ctx/R", "-t", "px:1",
                 "--build-arg", "HTTP_PROXY=http://proxy.invalid:3128",
                 "--build-arg", "no_proxy=localhost", store=store)
    assert r.rc == 0, r
    assert "not consumed" not in r.err
    assert cat(store, "px:1", "/proxy.txt") == "proxy=[http://proxy.invalid:3128] [localhost]\n"
    history = json.dumps(inspect(store, "px:1")["config"]["history"])
    assert "proxy.invalid" not in history
    # another proxy: the step is a cache hit (BuildKit keeps proxies out of keys)
    r2 = imgbuild("--progress=plain", "build", tmp_path / "ctx/R", "-t", "px:2",
                  "--build-arg", "HTTP_PROXY=http://other.invalid:8080", store=store)
    assert r2.rc == 0, r2
    assert "RUN echo" in r2.err and " CACHED" in r2.err, r2
    assert cat(store, "px:2", "/proxy.txt") == cat(store, "px:1", "/proxy.txt")


MOUNTS = """FROM {base}
RUN useradd -m -d /home/builder builder
WORKDIR /src/app
RUN --mount=target=. cat hello.txt > /from-dot.txt
RUN --mount=type=bind,source=sub,target=sub/../data cat /src/app/data/f > /from-rel.txt
RUN echo "$HOME" > /home-root.txt
USER builder
RUN echo "$HOME" > /tmp/home-builder.txt
USER root
ENV HOME=/custom
RUN echo "$HOME" > /home-env.txt
"""


def test_relative_mount_targets_and_home(tmp_path, base_image):
    store = tmp_path / "store"
    ctx = tmp_path / "ctx"
    write(ctx / "R", MOUNTS.format(base=base_image))
    write(ctx / "hello.txt", "hello from the context\n")
    write(ctx / "sub/f", "sub file\n")
    r = imgbuild("build", ctx / "R", "-t", "mnt:1", store=store)
    assert r.rc == 0, r
    assert cat(store, "mnt:1", "/from-dot.txt") == "hello from the context\n"
    assert cat(store, "mnt:1", "/from-rel.txt") == "sub file\n"
    assert cat(store, "mnt:1", "/home-root.txt") == "/root\n"
    assert cat(store, "mnt:1", "/tmp/home-builder.txt") == "/home/builder\n"
    assert cat(store, "mnt:1", "/home-env.txt") == "/custom\n"
    # nothing of the mounts stays in the image
    r = imgbuild("run", "mnt:1", "--", "ls", "-A", "/src/app", store=store)
    assert r.rc == 0 and r.out == "", r


def test_run_entrypoint_and_home(tmp_path, base_image):
    store = tmp_path / "store"
    write(tmp_path / "ctx/R", f'FROM {base_image}\nENTRYPOINT ["false"]\nCMD ["x"]\n')
    assert imgbuild("build", tmp_path / "ctx/R", "-t", "ep:1", store=store).rc == 0
    assert imgbuild("run", "ep:1", store=store).rc == 1
    r = imgbuild("run", "--entrypoint", "sh", "ep:1", "-c", 'echo "$HOME $0"', store=store)
    assert r.rc == 0, r
    assert r.out == "/root sh\n"
    r = imgbuild("run", "--entrypoint", "", "ep:1", "echo", "no entrypoint", store=store)
    assert (r.rc, r.out) == (0, "no entrypoint\n"), r
    r = imgbuild("run", "--mount", "type=tmpfs,target=rel", "ep:1", store=store)
    assert r.rc == 125
    assert "mount target rel: must be an absolute path" in r.err


HISTORY = """FROM {base}
ARG A=1 B
ARG C=${{A}}x
ENV B=fromenv
RUN echo hi > /hi
ARG LAST=end
"""


def test_history_texts_as_buildkit(tmp_path, base_image):
    """BuildKit's history: an empty-layer "ARG NAME=default" entry per ARG
    instruction (the default, not the --build-arg value), and RUN's text
    prefixed with every ARG of the stage, an ENV of the same name winning:
    "|3 A=2 B=fromenv C=1x /bin/sh -c ..."."""
    store = tmp_path / "store"
    write(tmp_path / "ctx/R", HISTORY.format(base=base_image))
    r = imgbuild("build", tmp_path / "ctx/R", "--build-arg", "A=2", "-t", "h:1", store=store)
    assert r.rc == 0, r
    hist = inspect(store, "h:1")["config"]["history"][-5:]
    assert [(h["created_by"], h.get("empty_layer", False)) for h in hist] == [
        ("ARG A=1 B", True),
        ("ARG C=2x", True),
        ("ENV B=fromenv", True),
        ("RUN |3 A=2 B=fromenv C=2x /bin/sh -c echo hi > /hi", False),
        ("ARG LAST=end", True),
    ]
    # an ARG makes nothing: it takes the time of the entry before it, so a
    # rebuild from the cache gives the same image even with ARG last
    assert hist[4]["created"] == hist[3]["created"]
    r = imgbuild("build", tmp_path / "ctx/R", "--build-arg", "A=2", "-t", "h:2", store=store)
    assert r.rc == 0, r
    assert inspect(store, "h:2")["digest"] == inspect(store, "h:1")["digest"]
