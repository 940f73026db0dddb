"""The real framework builds (make e2e-frameworks) reuse the e2e suite's
helpers and fixtures (tests/e2e/conftest.py): imgbuild(), the local
registry, the Debian bookworm base image."""
import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "e2e_conftest", Path(__file__).resolve().parents[1] / "e2e" / "conftest.py")
e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e)

# fixtures, found by pytest as attributes of this conftest
registry = e2e.registry
base_image = e2e.base_image
_remove_tmp_path = e2e._remove_tmp_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sources  # noqa: E402

imgbuild = e2e.imgbuild
RECIPE = e2e.ROOT / "recipes/torch110.recipe"
CLIENT = "localhost/orion-client:cu-none-torch1.13.1-py3"
PY_DIST = "/usr/local/lib/python3.11/dist-packages"
PLAT = "manylinux_2_36_x86_64"  # bookworm's glibc
# the extension modules' versioned symbols allow manylinux_2_34: the
# repair adds that tag, as auditwheel does
TAGS = "manylinux_2_34_x86_64.manylinux_2_36_x86_64"


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """torchvision 0.14.1's source and the stand-in torch, over HTTP."""
    s = sources.Served(tmp_path_factory.mktemp("fw-src"))
    yield s
    s.shutdown()


@pytest.fixture(scope="session")
def built(base_image, served, tmp_path_factory):
    """recipes/torch110.recipe on the stand-in, torchvision 0.14.1 compiled;
    the store also holds the stand-in base."""
    store = tmp_path_factory.mktemp("fw-store")
    work = tmp_path_factory.mktemp("fw-work")
    sources.standin_args(imgbuild, base_image, store, work)
    r = imgbuild(RECIPE,
                 "--build-arg", f"BASE={sources.STANDIN}", "--build-arg", f"CLIENT_BASE={sources.STANDIN}",
                 "--build-arg", "APT_PACKAGES=", "--build-arg", "PIP_PACKAGES=",
                 "--build-arg", "NCCL_VERSION=",
                 "--build-arg", f"TORCH_REPO={served.url}/pytorch.git",
                 "--build-arg", "TORCH_VERSION=v1.13.1",
                 "--build-arg", f"VISION_REPO={served.url}/vision.git",
                 "--build-arg", "VISION_VERSION=v0.14.1",
                 "--build-arg", "FORCE_CUDA=0", "--build-arg", "MAX_JOBS=2",
                 "--build-arg", "CLIENT_APT_PACKAGES=", "--build-arg", "CLIENT_PIP_PACKAGES=",
                 "--build-arg", f"PY_DIST={PY_DIST}",
                 "--build-arg", f"REPAIR={PLAT}",
                 "--build-arg", f"CLIENT_IMAGE={CLIENT}",
                 store=store, cwd=work, timeout=3600)
    assert r.rc == 0, r
    # torchvision's version.txt says 0.14.1a0; with no BUILD_VERSION its
    # setup.py adds the commit it was built from
    version = f"0.14.1a0+{served.vision_sha[:7]}"
    return {"store": store, "work": work, "build": r, "version": version,
            "wheel": f"torchvision-{version}-cp311-cp311-{TAGS}.whl"}
