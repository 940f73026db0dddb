"""registries.conf (containers-registries.conf(5) v2 subset): mirrors tried
in order before the primary location, prefix rewrites, blocked registries,
and how the file is found.  Nothing here needs the internet: docker.io
references are served by a mirror or a rewritten location on 127.0.0.1."""
import json
import re
import socket
from pathlib import Path

import pytest

from conftest import imgbuild, sh


def dead_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def conf(tmp_path, text, name="registries.conf"):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def source_of(store, name):
    index = json.loads((Path(store) / "index.json").read_text())
    for m in index["manifests"]:
        if m["annotations"]["org.opencontainers.image.ref.name"] == name:
            return m["annotations"].get("org.imgbuild.source")
    raise AssertionError(f"{name} not in {index}")


def test_docker_hub_image_through_a_mirror(registry, base_image, tmp_path):
    c = conf(tmp_path, f"""
[[registry]]
prefix = "docker.io/library"
location = "docker.io/library"

[[registry.mirror]]
location = "{registry}"
""")
    store = tmp_path / "s"
    r = imgbuild("pull", "--registries-conf", c, "debian:bookworm", store=store)
    assert r.rc == 0, r
    assert f"from mirror {registry}/debian" in r.err
    assert source_of(store, "docker.io/library/debian:bookworm") == f"{registry}/debian"
    info = json.loads(imgbuild("inspect", "debian:bookworm", store=store).out)
    remote = json.loads(sh("skopeo", "inspect", "--tls-verify=false",
                           f"docker://{registry}/debian:bookworm").stdout)
    assert [l["digest"] for l in info["manifest"]["layers"]] == remote["Layers"]


def test_dead_and_missing_mirrors_fall_through(registry, base_image, tmp_path):
    port = dead_port()
    c = conf(tmp_path, f"""
[[registry]]
prefix = "docker.io/library"
location = "docker.io/library"
mirror = [{{ location = "127.0.0.1:{port}" }}, {{ location = "{registry}/no/such/path" }}]

[[registry.mirror]]
location = "{registry}"
""")
    store = tmp_path / "s"
    r = imgbuild("-v", "pull", "--registries-conf", c, "debian:bookworm-oci", store=store)
    assert r.rc == 0, r
    assert f"mirror 127.0.0.1:{port}/debian: connect to 127.0.0.1:{port}: connection refused; " \
           "trying the next source" in r.err
    assert f"mirror {registry}/no/such/path/debian:" in r.err and "unknown" in r.err
    assert source_of(store, "docker.io/library/debian:bookworm-oci") == f"{registry}/debian"


def test_prefix_rewrite_for_pull_and_push_never_to_a_mirror(registry, base_image, tmp_path):
    c = conf(tmp_path, f"""
[[registry]]
prefix = "docker.io/library"
location = "{registry}/rewritten"
""")
    # put the image where the rewrite points
    sh("skopeo", "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false",
       f"docker://{registry}/debian:bookworm", f"docker://{registry}/rewritten/debian:bookworm")
    store = tmp_path / "s"
    r = imgbuild("pull", "--registries-conf", c, "debian:bookworm", store=store)
    assert r.rc == 0, r
    assert source_of(store, "docker.io/library/debian:bookworm") == f"{registry}/rewritten/debian"
    r = imgbuild("push", "--registries-conf", c, "debian:bookworm", "pushed-here:1", store=store)
    assert r.rc == 0, r
    remote = json.loads(sh("skopeo", "inspect", "--tls-verify=false",
                           f"docker://{registry}/rewritten/pushed-here:1").stdout)
    # docker's last push line: "TAG: digest: sha256:... size: N"
    assert re.fullmatch(rf"1: digest: {remote['Digest']} size: \d+", r.err.strip().splitlines()[-1]), r

    # a live mirror and a dead primary: the push goes to the primary and fails
    port = dead_port()
    c2 = conf(tmp_path, f"""
[[registry]]
prefix = "docker.io/library"
location = "127.0.0.1:{port}/lib"
[[registry.mirror]]
location = "{registry}/rewritten"
""", name="c2.conf")
    r = imgbuild("push", "--registries-conf", c2, "debian:bookworm", "docker.io/library/never:1", store=store)
    assert r.rc == 1, r
    assert f"127.0.0.1:{port}" in r.err and "refused" in r.err


def test_blocked_registry(registry, base_image, tmp_path):
    c = conf(tmp_path, f"""
[[registry]]
location = "{registry}"
blocked = true
""")
    store = tmp_path / "s"
    r = imgbuild("pull", "--registries-conf", c, f"{registry}/debian:bookworm", store=store)
    assert r.rc == 1, r
    assert f"{registry}/debian: blocked by {c}:2" in r.err and len(r.err.strip().splitlines()) == 1
    assert json.loads((store / "index.json").read_text())["manifests"] == []
    r = imgbuild("push", "--registries-conf", c, "sha256:" + "0" * 64, f"{registry}/x:1", store=store)
    assert r.rc == 1


def test_config_file_lookup_and_errors(registry, base_image, tmp_path):
    text = f"""
[[registry]]
location = "{registry}"
blocked = true
"""
    # $IMGBUILD_REGISTRIES_CONF
    c = conf(tmp_path, text, "env.conf")
    r = imgbuild("pull", f"{registry}/debian:bookworm", store=tmp_path / "s1",
                 env={"IMGBUILD_REGISTRIES_CONF": str(c)})
    assert r.rc == 1 and "blocked" in r.err, r
    # $XDG_CONFIG_HOME/imgbuild/registries.conf
    conf(tmp_path, text, "xdg/imgbuild/registries.conf")
    r = imgbuild("pull", f"{registry}/debian:bookworm", store=tmp_path / "s2",
                 env={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "IMGBUILD_REGISTRIES_CONF": ""})
    assert r.rc == 1 and "blocked" in r.err, r
    # a broken file given by the user names file and line
    bad = conf(tmp_path, "[[registry]]\nlocation = 'a'\ninsecure = yes\n", "bad.conf")
    r = imgbuild("pull", "--registries-conf", bad, f"{registry}/debian:bookworm", store=tmp_path / "s3")
    assert r.rc == 1, r
    assert f"{bad}:3:" in r.err and len(r.err.strip().splitlines()) == 1
    r = imgbuild("pull", "--registries-conf", tmp_path / "missing.conf", f"{registry}/debian:bookworm",
                 store=tmp_path / "s4")
    assert r.rc == 1 and "missing.conf" in r.err, r


def test_a_drop_in_in_the_users_registries_conf_d_is_used(registry, base_image, tmp_path):
    """podman's reading: ~/.config/containers/registries.conf.d/*.conf add
    to (and, for the same prefix, replace) the main file's entries."""
    home = tmp_path / "home"
    conf(home, f"""
[[registry]]
prefix = "docker.io/library"
location = "docker.io/library"
blocked = true
""", ".config/containers/registries.conf")
    conf(home, f"""
[[registry]]
prefix = "docker.io/library"
location = "docker.io/library"

[[registry.mirror]]
location = "{registry}"
""", ".config/containers/registries.conf.d/50-mirror.conf")
    conf(home, "not TOML at all [", ".config/containers/registries.conf.d/README")
    store = tmp_path / "s"
    env = {"HOME": str(home), "XDG_CONFIG_HOME": "", "IMGBUILD_REGISTRIES_CONF": ""}
    r = imgbuild("pull", "debian:bookworm", store=store, env=env)
    assert r.rc == 0, r
    assert f"from mirror {registry}/debian" in r.err, r
    assert source_of(store, "docker.io/library/debian:bookworm") == f"{registry}/debian"
    # a broken user drop-in is an error naming it
    bad = conf(home, "[[registry]]\nprefix = 'x.io'\ninsecure = yes\n",
               ".config/containers/registries.conf.d/60-bad.conf")
    r = imgbuild("pull", "debian:bookworm", store=tmp_path / "s2", env=env)
    assert r.rc == 1 and f"{bad}:3:" in r.err, r


def test_short_names_aliases_and_search_registries(registry, base_image, tmp_path):
    """containers-registries.conf(5)'s short names (issue 21, item 5):
    an [aliases] entry, unqualified-search-registries tried in order
    (short-name-mode permissive), and an ambiguous name refused in
    enforcing mode, for pull, FROM and run alike."""
    port = dead_port()
    alias = conf(tmp_path, f"""
[aliases]
"shortbase" = "{registry}/debian"
""", "alias.conf")
    store = tmp_path / "s"
    r = imgbuild("pull", "--registries-conf", alias, "shortbase:bookworm", store=store)
    assert r.rc == 0, r
    assert f"{registry}/debian:bookworm" in " ".join(l.split()[0] for l in
                                                     imgbuild("images", "-n", store=store).out.splitlines())
    recipe = tmp_path / "ctx/r.recipe"
    recipe.parent.mkdir(parents=True)
    recipe.write_text("FROM shortbase:bookworm\nRUN cat /etc/debian_version > /v\n")
    r = imgbuild("build", "--registries-conf", alias, recipe, store=tmp_path / "s-build")
    assert r.rc == 0, r
    r = imgbuild("--registries-conf", alias, "run", "shortbase:bookworm", "--", "cat",
                 "/etc/debian_version", store=tmp_path / "s-run")
    assert r.rc == 0 and r.out.startswith("12."), r
    # search registries: a dead one first, then ours, tried in order
    search = conf(tmp_path, f"""
unqualified-search-registries = ["127.0.0.1:{port}", "{registry}"]
short-name-mode = "permissive"
""", "search.conf")
    s2 = tmp_path / "s2"
    r = imgbuild("pull", "--registries-conf", search, "debian:bookworm", store=s2)
    assert r.rc == 0, r
    assert [l.split()[0] for l in imgbuild("images", "-n", store=s2).out.splitlines()] == [
        f"{registry}/debian:bookworm"]
    # FROM with the name stored: taken from the store, no pull
    recipe.write_text("FROM debian:bookworm\nRUN true\n")
    r = imgbuild("build", "--registries-conf", search, recipe, store=s2)
    assert r.rc == 0 and "pull " not in r.err, r
    # enforcing (the default): two registries are ambiguous, said before any request
    enforcing = conf(tmp_path, f"""
unqualified-search-registries = ["127.0.0.1:{port}", "{registry}"]
""", "enforcing.conf")
    r = imgbuild("pull", "--registries-conf", enforcing, "debian:bookworm", store=tmp_path / "s3")
    assert r.rc == 1, r
    assert ("short name debian:bookworm is ambiguous: unqualified-search-registries in "
            f"{enforcing} lists 127.0.0.1:{port}, {registry}") in r.err, r
    r = imgbuild("build", "--registries-conf", enforcing, recipe, store=tmp_path / "s3")
    assert r.rc == 1 and "FROM debian:bookworm: short name debian:bookworm is ambiguous" in r.err, r
    # a name with a registry is never searched
    r = imgbuild("pull", "--registries-conf", enforcing, base_image, store=tmp_path / "s3")
    assert r.rc == 0, r
