"""Wheels for linux/arm64 built on this amd64 host (docs/recipe.md, "Other
platforms"): tests/fixtures/wheels/toolchain.recipe and build.recipe built
with --platform linux/arm64 on the arm64 Debian image (every RUN through
qemu-user; the toolchain's apt step kept in $IMGBUILD_TEST_CACHE as the
amd64 one is), the wheels audited against the aarch64 manylinux policies
with the answers auditwheel gives (recorded in
tests/fixtures/wheels/auditwheel.json, "aarch64", with how), the libyaml
extension repaired with the arm64 stage's own libyaml, and both imported
under qemu in an arm64 Debian root filesystem that lacks libyaml."""
import hashlib
import json
import shutil
import zipfile

import pytest

from conftest import cache_dir, imgbuild, local_cache_args
from test_wheel import AUDITWHEEL, EPOCH, FIXTURES, PYVER, audit

TOOLCHAIN = "localhost/ibw-toolchain:bookworm-arm64"
RECORDED = AUDITWHEEL["aarch64"]


@pytest.fixture(scope="module")
def arm_store(multiarch, tmp_path_factory):
    store = tmp_path_factory.mktemp("wheel-arm64-store")
    cache = cache_dir() / "wheel-toolchain-arm64-cache"
    r = imgbuild(FIXTURES / "toolchain.recipe", "--platform", "linux/arm64",
                 "--build-arg", f"BASE={multiarch['multi']}", "-t", TOOLCHAIN,
                 *local_cache_args(cache), store=store, cwd=FIXTURES)
    assert r.rc == 0, r
    return store


@pytest.fixture(scope="module")
def arm(arm_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("built-arm64")
    r = imgbuild(FIXTURES / "build.recipe", "--platform", "linux/arm64",
                 "--build-arg", f"TOOLCHAIN={TOOLCHAIN}", "--context", FIXTURES,
                 "--output", f"type=local,dest={out}/dist,src=/wheels",
                 "--output", f"type=local,dest={out}/wheelhouse,src=/wheels/yamlext,"
                             "repair=manylinux_2_17_aarch64",
                 store=arm_store, cwd=out, env={"SOURCE_DATE_EPOCH": str(EPOCH)})
    assert r.rc == 0, r
    return {"out": out, "log": r.err,
            "wheels": {p.name.split("-")[0]: p for p in (out / "dist").glob("*/*.whl")},
            "repaired": sorted((out / "wheelhouse").iterdir())}


@pytest.fixture(scope="module")
def arm_root(arm_store, tmp_path_factory):
    """The arm64 toolchain's tree, for the audits' --root: auditwheel ran
    in it (auditwheel.json "aarch64", "how")."""
    root = tmp_path_factory.mktemp("arm64-root") / "r"
    r = imgbuild("unpack", TOOLCHAIN, root, store=arm_store)
    assert r.rc == 0, r
    return root


def audit_in(root, wheel):
    """`wheel audit --json --root ROOT`, its library paths as seen inside."""
    r = audit(wheel, "--json", "--root", root)
    assert r.rc == 0, r
    got = json.loads(r.out)
    got["external_libs"] = {k: v[len(str(root)):] if v else v
                            for k, v in got["external_libs"].items()}
    return got


def elf_machine(data):
    assert data[:4] == b"\x7fELF"
    return int.from_bytes(data[18:20], "little")


@pytest.mark.parametrize("dist", ["ibw_cext", "ibw_cpp", "ibw_yaml", "ibw_bl"])
def test_arm64_wheel_audits_as_auditwheel(arm, arm_root, dist):
    w = arm["wheels"][dist]
    assert w.name == f"{dist}-0.1-{PYVER}-{PYVER}-linux_aarch64.whl"
    with zipfile.ZipFile(w) as z:
        sos = [n for n in z.namelist() if n.endswith(".so")]
        assert sos and all(elf_machine(z.read(n)) == 183 for n in sos)  # EM_AARCH64
    want = RECORDED["show"].get(w.name)
    assert want, f"no auditwheel answer recorded for {w.name}"
    assert audit_in(arm_root, w) == want
    # the build's own audit said the same tag
    assert f"wheel {w.name}: " in arm["log"]
    assert f"platform tag {want['overall_tag']}" in arm["log"]


def test_arm64_repair_grafts_the_arm64_libyaml(arm, arm_root):
    name = f"ibw_yaml-0.1-{PYVER}-{PYVER}-manylinux2014_aarch64.manylinux_2_17_aarch64.whl"
    assert [p.name for p in arm["repaired"]] == [name]
    w = arm["repaired"][0]
    with zipfile.ZipFile(w) as z:
        libs = [n for n in z.namelist() if n.startswith("ibw_yaml.libs/")]
        assert len(libs) == 1 and "libyaml" in libs[0], libs
        assert elf_machine(z.read(libs[0])) == 183
    assert audit_in(arm_root, w) == RECORDED["repaired"][name]
    # the same bytes as the wheels auditwheel was asked about
    for p in [*arm["wheels"].values(), w]:
        assert hashlib.sha256(p.read_bytes()).hexdigest() == RECORDED["wheel_sha256"][p.name], p


def test_arm64_wheels_import_under_qemu(arm, arm_store, tmp_path):
    """In the arm64 toolchain's tree without libyaml: the repaired wheel
    imports (its grafted copy), the original does not; the C extension
    adds."""
    root = tmp_path / "r"
    r = imgbuild("unpack", TOOLCHAIN, root, store=arm_store)
    assert r.rc == 0, r
    gone = list((root / "usr/lib/aarch64-linux-gnu").glob("libyaml*"))
    assert gone
    for p in gone:
        p.unlink()
    for name, w in (("repaired", arm["repaired"][0]), ("orig", arm["wheels"]["ibw_yaml"]),
                    ("cext", arm["wheels"]["ibw_cext"])):
        with zipfile.ZipFile(w) as z:
            z.extractall(tmp_path / "whl" / name)
    code = ("import platform, sys; sys.path.insert(0, '/opt/whl/{w}'); import {m}; "
            "print(platform.machine(), {call})")

    def run(w, m, call):
        return imgbuild("run", "-v", f"{tmp_path / 'whl'}:/opt/whl:ro", "--rootfs", root, "--",
                        "python3", "-c", code.format(w=w, m=m, call=call), store=arm_store)

    r = run("repaired", "ibw_yaml", "ibw_yaml.first_scalar('greeting: hello')")
    assert r.rc == 0, r
    assert r.out == "aarch64 greeting\n"
    r = run("orig", "ibw_yaml", "1")
    assert r.rc != 0 and "libyaml-0.so.2" in r.err, r
    r = run("cext", "ibw_cext", "ibw_cext.add(2, 3)")
    assert r.rc == 0, r
    assert r.out == "aarch64 5\n"
    shutil.rmtree(tmp_path / "whl")
