"""Progress options of the CLI (common/progress.c is unit-tested in
tests/unit/test_progress.c).  The push progress e2e tests live on branch
issue3-progress until progress is wired into the merged push and pull."""
from conftest import imgbuild


def test_bad_progress_mode_is_a_usage_error(store):
    r = imgbuild("--progress=fancy", "images", store=store)
    assert r.rc == 2 and "--progress" in r.err and "fancy" in r.err
    r = imgbuild("images", store=store, env={"IMGBUILD_PROGRESS": "fancy"})
    assert r.rc == 2 and "IMGBUILD_PROGRESS" in r.err
