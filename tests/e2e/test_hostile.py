"""Hostile layers end to end (issue 4, "Unpack must be safe"): each attack
of tests/fixtures/hostile/make_layers.py, made into an image, pushed to the
registry and unpacked with `imgbuild unpack`.  Whatever the layer holds,
the directory outside the target stays byte for byte as it was, no file
appears beside it, and a refused layer fails with one error line naming
the entry and leaves neither a rootfs nor a stored image behind."""
import hashlib
import os
import sys
from pathlib import Path

import pytest

from conftest import ROOT, imgbuild, sh, stored_names

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "hostile"))
import make_layers  # noqa: E402


def snapshot(d):
    """Every path under d (and d's parent's entries) with type, mode and content hash."""
    out = {}
    for p in sorted([d, *d.rglob("*")]):
        st = p.lstat()
        h = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
        out[str(p)] = (st.st_mode, st.st_nlink, h)
    out["<siblings>"] = sorted(os.listdir(d.parent))
    return out


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    d = tmp_path_factory.mktemp("outside")
    (d / "sentinel").write_text("do not touch\n")
    (d / "sub").mkdir()
    (d / "sub" / "file").write_text("nor this\n")
    return d


@pytest.fixture(scope="module")
def hostile(registry, outside, tmp_path_factory):
    """name -> (reference in the registry, expected)."""
    layouts = tmp_path_factory.mktemp("hostile-layouts")
    refs = {}
    for name, (layers, expected) in make_layers.attacks(str(outside)).items():
        make_layers.write_layout(str(layouts / name), layers)
        ref = f"{registry}/hostile/{name}:1"
        sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layouts / name}:1",
           f"docker://{ref}")
        refs[name] = (ref, expected)
    return refs


NAMES = list(make_layers.attacks("/nowhere"))


@pytest.mark.parametrize("name", NAMES)
def test_hostile_layer(hostile, outside, tmp_path, name):
    ref, (outcome, text) = hostile[name]
    before = snapshot(outside)
    store, root = tmp_path / "store", tmp_path / "root"
    r = imgbuild("unpack", ref, root, store=store,
                 env={"IMGBUILD_MAX_LAYER_BYTES": str(16 << 20)})
    assert snapshot(outside) == before, r
    assert not (outside.parent / "escape").exists() and not Path("/escape").exists()
    if outcome == "ok":
        assert r.rc == 0, r
        assert root.is_dir()
        if name == "device-node":
            assert not (root / "dev" / "evil-null").exists()
            assert "device node" in r.err, r
        return
    assert r.rc == 1, r
    lines = [l for l in r.err.strip().splitlines() if not l.startswith("imgbuild: warning:")]
    last = lines[-1]
    assert last.startswith(f"imgbuild: pull {ref}: ") or last.startswith("imgbuild: unpack "), r
    assert "layer" in last, r
    assert text in last, r
    assert not root.exists(), r
    assert stored_names(store) == []
