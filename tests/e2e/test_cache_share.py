"""Sharing the build cache (--cache-to / --cache-from, builder/cache_io.h):
a build in one store exports its step records and layers to a local OCI
layout and to a registry; a build in a fresh store that imports either runs
nothing and gives the same image; a cache that does not exist yet is only a
warning; the registry artifact is readable by other OCI tools."""
import json
import re
import subprocess

import pytest

from conftest import imgbuild, remove_tree

RECIPE = """
FROM {base} AS build
RUN head -c 16 /dev/urandom | od -An -tx1 > /random
COPY src/ /src/
RUN cat /src/a.txt /random > /out && head -c 8 /dev/urandom | od -An -tx1 >> /out

FROM {base}
COPY --from=build /out /opt/out
RUN head -c 8 /dev/urandom | od -An -tx1 > /client-random
CMD ["cat", "/opt/out"]
OUTPUT type=image,name=share:latest
"""

ARTIFACT_TYPE = "application/vnd.imgbuild.cache.v1"
CONFIG_TYPE = "application/vnd.imgbuild.cache.config.v1+json"


def steps(result):
    """[(step, keyword, cached?)] for RUN and COPY lines, in the order printed."""
    out = []
    for line in result.err.splitlines():
        m = re.match(r"^\[(\S+ \d+/\d+)\] (.*?)( CACHED)?$", line)
        if m and m.group(2).split(" ")[0] in ("RUN", "COPY"):
            out.append((m.group(1), m.group(2).split(" ")[0], bool(m.group(3))))
    return out


def digest(store):
    r = imgbuild("inspect", "share:latest", store=store)
    assert r.rc == 0, r
    j = json.loads(r.out)
    return j["digest"], j["manifest"]


def build(store, ctx, *extra):
    r = imgbuild("build", ctx / "r.recipe", *extra, store=store)
    assert r.rc == 0, r
    return r


@pytest.fixture(scope="module")
def exported(tmp_path_factory, registry, base_image):
    """Store A built the recipe with both --cache-to kinds."""
    top = tmp_path_factory.mktemp("cache-share")
    ctx = top / "ctx"
    (ctx / "src").mkdir(parents=True)
    (ctx / "src/a.txt").write_text("shared cache\n")
    (ctx / "r.recipe").write_text(RECIPE.format(base=base_image))
    store = top / "store-a"
    local = top / "exported/cache"
    ref = f"{registry}/cache/t:1"
    r = build(store, ctx, "--cache-to", f"type=local,dest={local},mode=max",
              "--cache-to", f"type=registry,ref={ref}")
    flags = steps(r)
    assert len(flags) == 5, r.err  # RUN, COPY, RUN; COPY --from, RUN
    assert not any(c for _, _, c in flags), r.err
    assert re.search(rf"cache exported to type=local,dest={re.escape(str(local))},mode=max: "
                     r"\d+ records, \d+ blobs \([\d.]+ MB\)", r.err), r.err
    assert f"cache exported to type=registry,ref={ref}: " in r.err, r.err
    yield {"top": top, "ctx": ctx, "local": local, "ref": ref, "digest": digest(store)}
    remove_tree(top)  # a store with the base image: do not leave it for the session


def check_all_cached(r, a):
    flags = steps(r)
    assert len(flags) == 5, r.err
    assert all(c for _, _, c in flags), r.err


def test_local_cache_in_a_fresh_store(exported, tmp_path):
    store = tmp_path / "store-b"
    spec = f"type=local,src={exported['local']}"
    r = build(store, exported["ctx"], "--cache-from", spec)
    assert re.search(rf"cache imported from {re.escape(spec)}: \d+ records", r.err), r.err
    check_all_cached(r, exported)
    assert digest(store) == exported["digest"]
    # the layout is one other OCI tools read
    layout = json.loads((exported["local"] / "index.json").read_text())
    m = layout["manifests"][0]
    assert m["annotations"]["org.opencontainers.image.ref.name"] == "cache"
    assert m["artifactType"] == ARTIFACT_TYPE


def test_registry_cache_in_a_fresh_store(exported, tmp_path):
    store = tmp_path / "store-c"
    spec = f"type=registry,ref={exported['ref']}"
    r = build(store, exported["ctx"], "--cache-from", spec)
    assert re.search(rf"cache imported from {re.escape(spec)}: \d+ records", r.err), r.err
    check_all_cached(r, exported)
    assert digest(store) == exported["digest"]


def test_missing_cache_is_a_warning(exported, registry, tmp_path):
    store = tmp_path / "store-d"
    spec = f"type=registry,ref={registry}/cache/never-pushed:1"
    missing_dir = f"type=local,src={tmp_path / 'no-such-dir'}"
    r = build(store, exported["ctx"], "--cache-from", spec, "--cache-from", missing_dir)
    assert f"warning: cache {spec} not found; building without it" in r.err, r.err
    assert f"warning: cache {missing_dir} not found; building without it" in r.err, r.err
    flags = steps(r)
    assert len(flags) == 5, r.err
    assert not any(c for _, _, c in flags), r.err
    assert digest(store)[0] != exported["digest"][0]  # the RUNs ran again: other random bytes


def test_bad_spec_is_an_error(exported, tmp_path):
    r = imgbuild("build", exported["ctx"] / "r.recipe", "--cache-to", "type=s3,bucket=x",
                 store=tmp_path / "store-e")
    assert r.rc != 0, r
    assert 'type=s3,bucket=x: unknown cache type "s3"' in r.err, r.err


def test_registry_artifact_is_readable_by_skopeo(exported):
    p = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                        f"docker://{exported['ref']}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert m["artifactType"] == ARTIFACT_TYPE
    assert m["config"]["mediaType"] == CONFIG_TYPE
    # every layer of the image built is among the blobs
    image_layers = {l["digest"] for l in exported["digest"][1]["layers"]}
    assert image_layers <= {l["digest"] for l in m["layers"]}


def test_registry_cache_goes_through_registries_conf(exported, registry, tmp_path):
    """A cache reference is a registry reference like any other: the
    registries configuration's location rewrite applies to --cache-to and
    --cache-from (the name below exists only in that file), and a mirror
    that lacks the cache hands over to the location, as for pulls."""
    conf = tmp_path / "registries.conf"
    conf.write_text(f"""
[[registry]]
prefix = "cache.example/team"
location = "{registry}/rewritten"

[[registry.mirror]]
location = "{registry}/empty-mirror"
""")
    env = {"IMGBUILD_REGISTRIES_CONF": str(conf)}
    ref = "cache.example/team/cache:1"
    r = imgbuild("build", exported["ctx"] / "r.recipe", "--cache-from", f"type=local,src={exported['local']}",
                 "--cache-to", f"type=registry,ref={ref}", store=tmp_path / "store-f", env=env)
    assert r.rc == 0, r
    assert f"cache exported to type=registry,ref={ref}: " in r.err, r.err
    # it landed where the configuration sends it
    out = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{registry}/rewritten/cache:1"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["artifactType"] == ARTIFACT_TYPE
    store = tmp_path / "store-g"
    spec = f"type=registry,ref={ref}"
    r = imgbuild("build", exported["ctx"] / "r.recipe", "--cache-from", spec, store=store, env=env)
    assert r.rc == 0, r
    assert re.search(rf"cache imported from {re.escape(spec)}: \d+ records", r.err), r.err
    check_all_cached(r, exported)
    assert digest(store) == exported["digest"]
    # without the configuration the name means a registry that does not exist
    r = imgbuild("build", exported["ctx"] / "r.recipe", "--cache-from", spec,
                 store=tmp_path / "store-h", env={"IMGBUILD_REGISTRIES_CONF": ""})
    assert "cache.example" in r.err, r
