"""make e2e-frameworks: recipes/framework-wheels.recipe's SOURCE MODE
(BUILD_FROM=source, the seed's path): the torchvision cell of a --matrix
over FRAMEWORK builds torchvision 0.14.1 from its real source (the same
git repository as test_torchvision.py, cloned at the version table's tag
for PYTORCH_VERSION=1.13.1) in the conda environment, with the seed's
switches, and writes one repaired wheel for the cell.  It must be the
wheel recipes/torch110.recipe makes from that source: the same RECORD
(every file's sha256 and size), so the same compiled operators.  The
stand-in base is test_torchvision's with the stand-in conda
(tests/e2e/standin/conda: a venv of bookworm's python 3.11 that sees
Debian's torch); INSTALL_TORCH=0 builds against that torch (no PyTorch
index here)."""
import shutil
import zipfile

import pytest

import sources
from conftest import e2e, PLAT

imgbuild = e2e.imgbuild
RECIPE = e2e.ROOT / "recipes/framework-wheels.recipe"
CONDA_STANDIN = "localhost/frameworks-conda-standin:bookworm"


@pytest.fixture(scope="module")
def source_cell(built, served, tmp_path_factory):
    store, work = built["store"], tmp_path_factory.mktemp("fw-source")
    shutil.copy(e2e.ROOT / "tests/e2e/standin/conda", work / "conda")
    (work / "conda.recipe").write_text(
        f"FROM {sources.STANDIN}\nCOPY --chmod=755 conda /opt/conda/bin/conda\n"
        f"OUTPUT type=image,name={CONDA_STANDIN}\n")
    r = imgbuild(work / "conda.recipe", store=store, cwd=work)
    assert r.rc == 0, r
    r = imgbuild(RECIPE, "--build-arg", f"BASE={CONDA_STANDIN}",
                 "--build-arg", "BUILD_FROM=source", "--matrix", "FRAMEWORK=torchvision",
                 "--build-arg", "PYTORCH_VERSION=1.13.1", "--build-arg", "PYTHON_VERSION=3.11",
                 "--build-arg", f"VISION_REPO={served.url}/vision.git",
                 "--build-arg", f"TORCH_REPO={served.url}/pytorch.git",
                 "--build-arg", "INSTALL_TORCH=0", "--build-arg", "MAX_JOBS=2",
                 "--build-arg", "WHEEL_POLICY=manylinux_2_36",
                 store=store, cwd=work, timeout=3600)
    assert r.rc == 0, r
    return {"work": work, "build": r}


def record(path):
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        return sorted(z.read(name).decode().splitlines())


def test_source_cell_writes_one_repaired_wheel(built, source_cell):
    d = source_cell["work"] / "dist/torch1.13.1-py3.11"
    assert sorted(p.name for p in d.iterdir()) == ["build-info-torchvision.txt", built["wheel"]]
    info = (d / "build-info-torchvision.txt").read_text()
    assert "framework=torchvision 0.14.1 (v0.14.1)\n" in info, info
    assert "built from source\n" in info and "variant=cpu\n" in info, info
    assert "USE_MKLDNN=1 USE_CUDA=0 USE_CUDNN=0 USE_MPI=1 FORCE_CUDA=0 BLAS=\n" in info, info
    log = source_cell["build"].err
    assert f"repaired as {built['wheel']}" in log, log
    assert "matrix 1/1: FRAMEWORK=torchvision" in log or "FRAMEWORK=torchvision" in log, log


def test_source_cell_wheel_is_the_torch110_wheel(built, source_cell):
    """The same source built by the two recipes: the same RECORD (the
    compiled _C.so and image.so, the grafted libjpeg and libpng, every
    Python file, byte for byte by their digests)."""
    ours = source_cell["work"] / "dist/torch1.13.1-py3.11" / built["wheel"]
    theirs = built["work"] / "dist" / built["wheel"]
    rec = record(ours)
    assert any(r.startswith("torchvision/_C.so,sha256=") for r in rec), rec
    assert rec == record(theirs)
    # both require the torch they were compiled against, as PyTorch's own
    # torchvision wheels do (the table's version, not the row's name)
    for w in (ours, theirs):
        with zipfile.ZipFile(w) as z:
            meta = z.read(f"torchvision-{built['version']}.dist-info/METADATA").decode()
        assert "\nRequires-Dist: torch (==1.13.1)\n" in meta, meta
