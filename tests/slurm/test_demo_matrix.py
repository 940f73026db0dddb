"""recipes/demo.recipe's matrix through Slurm (make e2e-slurm): the four
cells PKG=markupsafe,python-crcmod x OPT=2,s as an array job on the
one-host cluster's two nodes, each node with its own store, the local
registry as build cache (--cache-to/--cache-from) and image output.  One
task is cancelled mid-build and requeued; the matrix still completes.
Every cell's wheel and image is checked against a local --matrix -j 2
build of the same cells in a store of its own (same wheel RECORD, same
image digests: both --reproducible), and the cells' logs show the shared
apt step taken from the registry cache, not built again."""
import json
import os
import re
import subprocess
import time
import zipfile

import pytest

from conftest import e2e

imgbuild = e2e.imgbuild
states = e2e.slurm_states
wait_for = e2e.wait_for
RECIPE = e2e.ROOT / "recipes/demo.recipe"
MATRIX = ["--matrix", "PKG=markupsafe,python-crcmod", "--matrix", "OPT=2,s"]
CELLS = [("markupsafe", "2"), ("markupsafe", "s"), ("python-crcmod", "2"),
         ("python-crcmod", "s")]


@pytest.fixture(scope="module")
def runs(registry, base_image, cluster, tmp_path_factory):
    """The matrix built through Slurm (task 3 cancelled mid-build and
    requeued) and locally: {"slurm": ..., "local": ...}."""
    s = tmp_path_factory.mktemp("slurm-demo")
    cache = f"type=registry,ref={registry}/demo-cache:{s.name}"
    cmd = [str(e2e.IMGBUILD), "--store", str(s / "unused-store"), "build", str(RECIPE), *MATRIX,
           "--build-arg", f"REGISTRY={registry}", "--reproducible", "-j", "2",
           "--cache-to", cache, "--slurm", "--slurm-dir", str(s / "jobs"),
           "--slurm-store", f"{s}/stores/%n", "--slurm-checkpoint", "0"]
    env = {**os.environ, **cluster, "SOURCE_DATE_EPOCH": ""}
    with open(s / "out.txt", "w") as out, open(s / "err.txt", "w") as err:
        p = subprocess.Popen(cmd, cwd=s, env=env, stdout=out, stderr=err)
        try:
            jobs = s / "jobs"
            wait_for(lambda: jobs.exists() and any(
                (d / "cells" / "2.start").exists() for d in jobs.glob("job-*")), 900)
            (d,) = jobs.glob("job-*")
            job = json.loads((d / "job.json").read_text())["array"]
            # mid-build: its build stage done and exported, its client
            # stage under way (or, at worst, just done)
            wait_for(lambda: "cache exported to" in (d / "logs" / "cell-2.out").read_text(), 900)
            subprocess.run(["scancel", f"{job}_2"], env=env)
            wait_for(lambda: states(cluster, job).get(2) in ("CANCELLED", "COMPLETED"), 60)
            subprocess.run(["scontrol", "requeue", f"{job}_2"], env=env, check=True)
            p.wait(timeout=1800)
        finally:
            p.kill()
    slurm = {"dir": s, "job_dir": d, "job": job, "rc": p.returncode,
             "out": (s / "out.txt").read_text(), "err": (s / "err.txt").read_text()}
    l = tmp_path_factory.mktemp("local-demo")
    r = imgbuild(RECIPE, *MATRIX, "--build-arg", f"REGISTRY={registry}", "--reproducible",
                 "-j", "2", store=l / "store", cwd=l, env={"SOURCE_DATE_EPOCH": ""})
    return {"slurm": slurm, "local": {"dir": l, "rc": r.rc, "out": r.out, "err": r.err},
            "registry": registry, "cache": cache, "cluster": cluster}


def test_every_cell_built_one_after_a_requeue(runs):
    s = runs["slurm"]
    assert s["rc"] == 0, s["out"] + s["err"][-4000:]
    assert s["out"].startswith("matrix summary: 4 of 4 combinations built, 0 failed\n")
    assert re.search(r"matrix 3/4: PKG=python-crcmod OPT=2: ok in \S+ s on n[12] "
                     r"\(attempt 2\)\n", s["out"]), s["out"]
    nodes = set(re.findall(r": ok in \S+ s on (n[12])", s["out"]))
    assert nodes == {"n1", "n2"}, s["out"]
    log = (s["job_dir"] / "logs" / "cell-2.out").read_text()
    assert "attempt 1," in log and "attempt 2," in log
    assert states(runs["cluster"], s["job"]) == {i: "COMPLETED" for i in range(4)}


def test_the_requeued_cell_resumed_from_its_own_cache(runs):
    s = runs["slurm"]
    log = (s["job_dir"] / "logs" / "cell-2.out").read_text()
    first, second = log.split("attempt 2,", 1)
    own = runs["cache"] + "-cell2"
    # the first attempt exported its build stage before the client stage
    assert f"cache exported to {own},ignore-error=true" in first, first[-3000:]
    # the second imported it and built nothing of that stage again
    assert f"cache imported from {own}: " in second, second[-3000:]
    assert re.search(r"\[build 5/6\] RUN apt-get source .* CACHED\n", second), second[-3000:]
    assert re.search(r"\[build 6/6\] RUN cd pkg .* CACHED\n", second), second[-3000:]


def record(whl):
    with zipfile.ZipFile(whl) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(".dist-info/RECORD")))


def test_wheels_have_the_local_builds_record(runs):
    assert runs["local"]["rc"] == 0, runs["local"]["err"][-4000:]
    for pkg, opt in CELLS:
        (sw,) = (runs["slurm"]["dir"] / "dist" / f"{pkg}-O{opt}").glob("*.whl")
        (lw,) = (runs["local"]["dir"] / "dist" / f"{pkg}-O{opt}").glob("*.whl")
        assert sw.name == lw.name
        assert record(sw) == record(lw), (pkg, opt)
        assert f"  wheel dist/{pkg}-O{opt}/{sw.name}\n" in runs["slurm"]["out"]


def test_images_have_the_local_builds_digests(runs):
    def digests(text):
        return dict(re.findall(r"  image (\S+) (sha256:[0-9a-f]{64})\n", text))

    s, l = digests(runs["slurm"]["out"]), digests(runs["local"]["out"])
    for pkg, opt in CELLS:
        name = f"{runs['registry']}/demo-client:{pkg}-O{opt}"
        assert s[name] == l[name], name
        # what the registry serves is what the cell pushed
        raw = subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{name}"],
                             check=True, capture_output=True, text=True).stdout
        assert json.loads(raw)["Digest"] == s[name]
        assert s[f"demo-client:{pkg}-O{opt}"] == s[name]


def test_cells_take_the_shared_steps_from_the_registry_cache(runs):
    s = runs["slurm"]
    seed = (s["job_dir"] / "logs" / "seed.out").read_text()
    apt = "RUN echo \"deb-src ${MIRROR} bookworm main\""
    # the seed built the shared apt step (and the client stage's) and exported them
    assert "Setting up gcc" in seed, seed[-3000:]
    assert f"cache exported to {runs['cache']}" in seed
    for i in range(4):
        log = (s["job_dir"] / "logs" / f"cell-{i}.out").read_text()
        assert f"cache imported from {runs['cache']}" in log, log[-3000:]
        # never built again in a cell: a cache hit on every node
        assert re.search(re.escape(apt) + r".* CACHED\n", log), log[-3000:]
        assert not re.search(r"Setting up gcc", log), log[-3000:]
