"""make e2e-slurm reuses the e2e suite's helpers and fixtures
(tests/e2e/conftest.py): imgbuild(), the local registry, the Debian
bookworm base image, the one-host Slurm cluster."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "e2e_conftest", Path(__file__).resolve().parents[1] / "e2e" / "conftest.py")
e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e)

# fixtures, found by pytest as attributes of this conftest
registry = e2e.registry
base_image = e2e.base_image
cluster = e2e.cluster
_remove_tmp_path = e2e._remove_tmp_path
