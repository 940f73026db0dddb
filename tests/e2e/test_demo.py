"""The main job: recipes/demo.recipe built for real, its outputs read back
by independent tools (zipfile, skopeo, umoci) and run."""
import base64
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, imgbuild, sh


@pytest.fixture(scope="module")
def demo(registry, base_image, tmp_path_factory):
    work = tmp_path_factory.mktemp("demo")
    store = tmp_path_factory.mktemp("demo-store")
    r = imgbuild(ROOT / "recipes/demo.recipe", "--build-arg", f"REGISTRY={registry}",
                 "--reproducible", store=store, cwd=work, env={"SOURCE_DATE_EPOCH": ""})
    assert r.rc == 0, r
    return {"work": work, "store": store, "registry": registry, "result": r}


def wheels(demo):
    ws = sorted((demo["work"] / "dist" / "markupsafe-O2").glob("*.whl"))
    assert ws, "no wheel in dist/markupsafe-O2/"
    return ws


def test_wheel_is_valid_per_record(demo):
    for whl in wheels(demo):
        with zipfile.ZipFile(whl) as z:
            assert z.testzip() is None
            names = z.namelist()
            record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
            rows = [l.split(",") for l in z.read(record_name).decode().splitlines() if l]
            listed = {row[0] for row in rows}
            assert listed == set(names), "RECORD must list every member"
            for path, digest, size in rows:
                if path == record_name:
                    assert digest == "" and size == ""
                    continue
                data = z.read(path)
                algo, b64 = digest.split("=", 1)
                assert algo == "sha256"
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert b64 == want, path
                assert int(size) == len(data), path
            wheel_meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
            assert "Root-Is-Purelib: false" in wheel_meta


def test_wheel_has_compiled_extension(demo):
    for whl in wheels(demo):
        # PEP 427 file name: {dist}-{version}-{python}-{abi}-{platform}.whl
        dist, version, py, abi, plat = whl.name[:-4].split("-")
        assert dist.lower() == "markupsafe"
        assert py.startswith("cp3") and abi.startswith("cp3") and plat == "linux_x86_64"
        with zipfile.ZipFile(whl) as z:
            so = [n for n in z.namelist() if n.startswith("markupsafe/_speedups") and n.endswith(".so")]
            assert so, "the C extension was not built"
            assert z.read(so[0])[:4] == b"\x7fELF"


def test_store_is_an_oci_layout_skopeo_reads(demo):
    out = sh("skopeo", "inspect", f"oci:{demo['store']}:docker.io/library/demo-client:latest").stdout
    info = json.loads(out)
    assert len(info["Layers"]) >= 3  # base + apt layer + COPY + pip install


def test_client_image_from_registry_has_wheel_and_package(demo, tmp_path):
    ref = f"docker://{demo['registry']}/demo-client:latest"
    info = json.loads(sh("skopeo", "inspect", "--tls-verify=false", ref).stdout)
    assert info["Labels"]["org.opencontainers.image.description"].startswith("imgbuild demo")
    sh("skopeo", "copy", "--src-tls-verify=false", ref, f"oci:{tmp_path}/img:t")
    sh("umoci", "unpack", "--rootless", "--image", f"{tmp_path}/img:t", tmp_path / "bundle")
    rootfs = tmp_path / "bundle" / "rootfs"
    for whl in wheels(demo):
        assert (rootfs / "opt" / whl.name).read_bytes() == whl.read_bytes()
    pkgs = list(rootfs.glob("usr/local/lib/python3*/dist-packages/markupsafe"))
    assert pkgs, "markupsafe not installed into dist-packages"
    assert list(pkgs[0].glob("_speedups*.so"))


def test_oci_output_layout(demo):
    layout = demo["work"] / "out" / "markupsafe-O2" / "client-oci"
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"]
    info = json.loads(sh("skopeo", "inspect", f"oci:{layout}").stdout)
    assert info["Digest"] == digest
    stored = json.loads(imgbuild("inspect", "demo-client:latest", store=demo["store"]).out)
    assert stored["digest"] == digest


def test_run_client_imports_package(demo):
    whl = wheels(demo)[0]
    version = whl.name.split("-")[1]
    r = imgbuild("run", "demo-client:latest", "--", "python3", "-c",
                 "import markupsafe, markupsafe._speedups; print(markupsafe.__version__)",
                 store=demo["store"])
    assert r.rc == 0, r
    assert r.out.strip() == version


def test_second_build_in_another_store_is_identical(demo, tmp_path):
    """--reproducible: a second cold build, in another store, minutes after
    the first, gives the same layers, config and manifest, and the same
    wheel bytes."""
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    r = imgbuild(ROOT / "recipes/demo.recipe", "--build-arg", f"REGISTRY={demo['registry']}",
                 "--reproducible", store=store, cwd=work,
                 env={"SOURCE_DATE_EPOCH": ""})
    assert r.rc == 0, r
    first = json.loads(imgbuild("inspect", "demo-client:latest", store=demo["store"]).out)
    second = json.loads(imgbuild("inspect", "demo-client:latest", store=store).out)
    assert [l["digest"] for l in second["manifest"]["layers"]] == \
        [l["digest"] for l in first["manifest"]["layers"]]
    assert second["manifest"]["config"]["digest"] == first["manifest"]["config"]["digest"]
    assert second["digest"] == first["digest"]
    assert first["config"]["created"] == "1970-01-01T00:00:00Z"
    one = {w.name: w.read_bytes() for w in wheels(demo)}
    two = {w.name: w.read_bytes() for w in (work / "dist" / "markupsafe-O2").glob("*.whl")}
    assert one == two
