"""imgbuild build --slurm against a real Slurm (Debian's 22.05): a one-host
cluster started here (tests/lib/slurm.sh: its own munged, slurmctld, and
two slurmd as the nodes n1 and n2), by whoever runs the suite: as root,
or as the unprivileged user, whose jobs its own daemons then run.

Each test's cells build in per-node stores (--slurm-store STORES/%n), so
what a cell finds is what its node built or the registry cache holds.  The
recipes are small (COPY steps FROM scratch, or one short RUN on the base
image), so the tests are about Slurm: array tasks on both nodes, the same
bytes as a local --matrix, the seed job and the registry cache, a failed
cell, --fail-fast, a task cancelled and requeued, Ctrl-C, a cache registry
that is down, --detach and `matrix status`, GPUs from Slurm's gres.
make e2e-slurm builds recipes/demo.recipe's matrix this way."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from conftest import IMGBUILD, ROOT, imgbuild, slurm_states, tiny_wheel, wait_for

TIMES = re.compile(r" in \d+\.\d s")
NODES = re.compile(r" on n[12]")


def slurm(cluster, *args):
    """A Slurm client command's stdout (it must succeed)."""
    return subprocess.run(list(map(str, args)), env={**os.environ, **cluster}, check=True,
                          capture_output=True, text=True).stdout


def slurm_args(tmp_path):
    return ["--slurm", "--slurm-dir", tmp_path / "jobs", "--slurm-store", f"{tmp_path}/stores/%n"]


def submit(cluster, tmp_path, recipe, *args, **kw):
    return imgbuild("build", recipe, *slurm_args(tmp_path), *args, store=tmp_path / "store",
                    cwd=tmp_path, env={**cluster, **kw.pop("env", {})}, **kw)


def popen(cluster, tmp_path, recipe, *args):
    """The submitting command, running (stdout, stderr to files)."""
    out = open(tmp_path / "out.txt", "w")
    err = open(tmp_path / "err.txt", "w")
    cmd = [str(IMGBUILD), "--store", str(tmp_path / "store"), "build", recipe,
           *map(str, slurm_args(tmp_path)), *args]
    return subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, **cluster}, stdout=out,
                            stderr=err)


def job_dir(tmp_path):
    (d,) = [p for p in (tmp_path / "jobs").iterdir() if p.name.startswith("job-")]
    return d


def job_id(tmp_path):
    return json.loads((job_dir(tmp_path) / "job.json").read_text())["array"]


COPY_RECIPE = """\
FROM scratch AS wheels
COPY shared.txt /shared.txt
ARG NAME=alpha
ARG VER=1.0
COPY wheels/${NAME}-${VER}-py3-none-any.whl /out/
OUTPUT type=local,dest=dist/${NAME}-${VER},src=/out
OUTPUT type=image,name=slurm-test:${NAME}-${VER}
"""
COMBOS = [("alpha", "1.0"), ("alpha", "2.0"), ("beta", "1.0"), ("beta", "2.0")]


def copy_context(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "m.recipe").write_text(COPY_RECIPE)
    (d / "shared.txt").write_text("in every cell\n")
    (d / "wheels").mkdir()
    for name, ver in COMBOS:
        tiny_wheel(d / "wheels", name, ver)


MATRIX = ["--matrix", "NAME=alpha,beta", "--matrix", "VER=1.0,2.0"]


def test_matrix_on_slurm_gives_what_a_local_matrix_gives(cluster, tmp_path):
    copy_context(tmp_path / "s")
    copy_context(tmp_path / "l")
    r = submit(cluster, tmp_path / "s", "m.recipe", *MATRIX, "-j", "2", "--reproducible")
    assert r.rc == 0, r
    local = imgbuild("build", "m.recipe", *MATRIX, "-j", "2", "--reproducible",
                     store=tmp_path / "l" / "store", cwd=tmp_path / "l")
    assert local.rc == 0, local
    # the same table, with the node each cell ran on; times differ
    assert NODES.sub("", TIMES.sub("", r.out)) == TIMES.sub("", local.out)
    assert r.out.startswith("matrix summary: 4 of 4 combinations built, 0 failed\n")
    ran_on = set(re.findall(r": ok in \d+\.\d s on (n[12])\n", r.out))
    assert ran_on == {"n1", "n2"}, r.out  # two cells at a time: both nodes
    # the same wheel bytes, written where the local matrix writes them
    for n, v in COMBOS:
        rel = f"dist/{n}-{v}/{n}-{v}-py3-none-any.whl"
        assert (tmp_path / "s" / rel).read_bytes() == (tmp_path / "l" / rel).read_bytes()
    # each node its own store, each cell's image in its node's store
    stores = tmp_path / "s" / "stores"
    assert sorted(p.name for p in stores.iterdir()) == ["n1", "n2"]
    for line in r.out.splitlines():
        m = re.match(r"matrix \d/4: NAME=(\w+) VER=([\d.]+): ok in \S+ s on (n[12])$", line)
        if m:
            got = imgbuild("inspect", f"slurm-test:{m[1]}-{m[2]}", store=stores / m[3])
            assert got.rc == 0, got
            assert f"slurm-test:{m[1]}-{m[2]} {json.loads(got.out)['digest']}" in r.out
    # stderr: a line per cell as it starts and as it ends
    for i in range(4):
        assert re.search(rf"matrix {i + 1}/4: .*: running on n[12]\n", r.err), r.err
    assert "submitted Slurm job" in r.err
    # the job's tasks: an array of 4, at most 2 at once, all done
    assert slurm_states(cluster, job_id(tmp_path / "s")) == {i: "COMPLETED" for i in range(4)}
    script = (job_dir(tmp_path / "s") / "cell.sh").read_text()
    assert "--slurm-task" in script and " --slurm " not in script and "'-j'" not in script


def test_seed_job_shares_the_common_steps_through_the_registry_cache(cluster, tmp_path,
                                                                     registry, base_image):
    (tmp_path / "r.recipe").write_text(
        f"FROM {base_image}\n"
        "RUN echo shared > /shared\n"
        "ARG NAME=a\n"
        "RUN echo $NAME > /name\n"
        "OUTPUT type=image,name=seed-test:${NAME}\n")
    cache = f"type=registry,ref={registry}/slurm-cache/{tmp_path.name}:c"
    r = submit(cluster, tmp_path, "r.recipe", "--matrix", "NAME=a,b", "-j", "2",
               "--cache-to", cache)
    assert r.rc == 0, r
    seed = re.search(r"seed job (\d+) \(the steps every cell shares\): ok in", r.err)
    assert seed, r.err
    logs = job_dir(tmp_path) / "logs"
    seed_log = (logs / "seed.out").read_text()
    # the seed runs the shared step, stops before ARG NAME, exports the cache
    assert re.search(r"RUN echo shared > /shared\n", seed_log), seed_log
    assert "--shared-only: stopped before line 3" in seed_log
    assert f"cache exported to {cache}" in seed_log
    for i in range(2):
        log = (logs / f"cell-{i}.out").read_text()
        # a fresh node store: the record comes from the registry, the step is a hit
        assert f"cache imported from {cache}" in log, log
        assert "RUN echo shared > /shared CACHED" in log, log
        assert re.search(r"RUN echo \$NAME > /name\n", log), log
        # and exported what it built to a tag of its own
        assert f"cache exported to {cache}-cell{i},ignore-error=true" in log, log
    # the cells ran after the seed (afterany)
    assert slurm_states(cluster, job_id(tmp_path)) == {0: "COMPLETED", 1: "COMPLETED"}
    # the same matrix again, on nodes with empty stores: every step of every
    # cell comes from the registry (the seed's tag and each cell's own)
    again = tmp_path / "again"
    again.mkdir()
    (again / "r.recipe").write_text((tmp_path / "r.recipe").read_text())
    r = submit(cluster, again, "r.recipe", "--matrix", "NAME=a,b", "-j", "2", "--cache-to", cache)
    assert r.rc == 0, r
    for i in range(2):
        log = (job_dir(again) / "logs" / f"cell-{i}.out").read_text()
        assert re.search(r"done, target stage \(unnamed\) image sha256:\w+ \(\d+ steps cached, "
                         r"0 run\)", log), log


def test_a_cell_exports_after_a_stage_only_past_the_checkpoint(cluster, tmp_path, registry,
                                                               base_image):
    """A cell's own cache tag is written at its end, and after a stage
    only when --slurm-checkpoint seconds have passed since its last export
    (default 60): these stages take a second, so once, or twice with 0."""
    recipe = (f"FROM {base_image} AS one\n"
              "RUN echo one > /one\n"
              f"FROM {base_image}\n"
              "COPY --from=one /one /one\n"
              "RUN echo two > /two\n"
              "OUTPUT type=image,name=checkpoint-test\n")
    for extra, exports in [([], 1), (["--slurm-checkpoint", "0"], 2)]:
        d = tmp_path / f"c{len(extra)}"
        d.mkdir()
        (d / "r.recipe").write_text(recipe)
        cache = f"type=registry,ref={registry}/slurm-cache/{tmp_path.name}:c{len(extra)}"
        r = submit(cluster, d, "r.recipe", "--matrix", "X=1", "--cache-to", cache, *extra)
        assert r.rc == 0, r
        log = (job_dir(d) / "logs" / "cell-0.out").read_text()
        assert log.count(f"cache exported to {cache}-cell0,ignore-error=true") == exports, log
    r = imgbuild("build", "r.recipe", "--slurm-checkpoint", "5", store=tmp_path / "store",
                 cwd=d, env=cluster)
    assert r.rc == 2 and "build: --slurm-checkpoint goes with --slurm" in r.err, r
    r = submit(cluster, d, "r.recipe", "--slurm-checkpoint", "soon")
    assert r.rc == 2 and "--slurm-checkpoint: expected seconds (0 or more), got 'soon'" in r.err


def test_a_failed_cell_does_not_stop_the_others(cluster, tmp_path):
    copy_context(tmp_path)
    r = submit(cluster, tmp_path, "m.recipe", "--matrix", "NAME=gamma,alpha,beta",
               "--build-arg", "VER=2.0")
    assert r.rc == 1, r
    out = TIMES.sub("", NODES.sub("", r.out))
    assert out.startswith("matrix summary: 2 of 3 combinations built, 1 failed\n"
                          "matrix 1/3: NAME=gamma: FAILED: m.recipe:5: COPY: "
                          "wheels/gamma-2.0-py3-none-any.whl"), r.out
    assert "matrix 3/3: NAME=beta: ok\n  wheel dist/beta-2.0/beta-2.0-py3-none-any.whl\n" in out
    assert r.err.rstrip().endswith("imgbuild: matrix: 1 of 3 combinations not built "
                                   f"(Slurm job {job_id(tmp_path)})")
    # the failing task exits non-zero: Slurm says FAILED
    assert slurm_states(cluster, job_id(tmp_path)) == {0: "FAILED", 1: "COMPLETED", 2: "COMPLETED"}


# gamma fails at once; the others take long enough that --fail-fast's
# cancel always finds alpha running and beta waiting (with a build of no
# time at all, alpha could finish between gamma's end and the cancel)
FAIL_FAST_RECIPE = """\
FROM {base}
ARG NAME=a
RUN if [ "$NAME" = gamma ]; then echo gamma fails >&2; exit 3; fi; sleep 60
OUTPUT type=image,name=fail-fast-test:${{NAME}}
"""


def test_fail_fast_cancels_the_rest(cluster, tmp_path, base_image):
    (tmp_path / "f.recipe").write_text(FAIL_FAST_RECIPE.format(base=base_image))
    r = submit(cluster, tmp_path, "f.recipe", "--matrix", "NAME=gamma,alpha,beta",
               "--fail-fast", "-j", "1")
    assert r.rc == 1, r
    lines = TIMES.sub("", NODES.sub("", r.out)).splitlines()
    assert lines[0] == "matrix summary: 0 of 3 combinations built, 1 failed", r.out
    assert lines[1].startswith("matrix 1/3: NAME=gamma: FAILED: ")
    assert lines[2:] == ["matrix 2/3: NAME=alpha: not built (CANCELLED by Slurm)",
                         "matrix 3/3: NAME=beta: not built (CANCELLED by Slurm)"], r.out
    assert "--fail-fast: cancelling Slurm job" in r.err
    assert slurm_states(cluster, job_id(tmp_path)) == {0: "FAILED", 1: "CANCELLED", 2: "CANCELLED"}


SLEEP_RECIPE = """\
FROM {base}
ARG NAME=a
ARG SLEEP=0
RUN sleep $SLEEP; echo $NAME > /name
OUTPUT type=image,name=sleep-test:${{NAME}}
"""


def test_a_cancelled_and_requeued_task_finishes_the_matrix(cluster, tmp_path, base_image):
    (tmp_path / "s.recipe").write_text(SLEEP_RECIPE.format(base=base_image))
    p = popen(cluster, tmp_path, "s.recipe", "--matrix", "NAME=a,b,c,d", "--build-arg",
              "SLEEP=6", "-j", "2")
    try:
        wait_for(lambda: (tmp_path / "jobs").exists() and any(
            (d / "cells" / "1.start").exists() for d in (tmp_path / "jobs").glob("job-*")))
        job = job_id(tmp_path)
        # mid-way through its RUN (the 6 s sleep), not through its pull
        log = job_dir(tmp_path) / "logs" / "cell-1.out"
        wait_for(lambda: log.exists() and "] RUN sleep" in log.read_text())
        time.sleep(1)
        slurm(cluster, "scancel", f"{job}_1")
        wait_for(lambda: slurm_states(cluster, job).get(1) == "CANCELLED")
        slurm(cluster, "scontrol", "requeue", f"{job}_1")
        p.wait(timeout=300)
    finally:
        p.kill()
    out = (tmp_path / "out.txt").read_text()
    err = (tmp_path / "err.txt").read_text()
    assert p.returncode == 0, out + err
    assert out.startswith("matrix summary: 4 of 4 combinations built, 0 failed\n"), out
    assert re.search(r"matrix 2/4: NAME=b: ok in \S+ s on n[12] \(attempt 2\)\n", out), out
    assert re.search(r"matrix 2/4: NAME=b: running on n[12] \(attempt 2\)", err), err
    # both attempts in the cell's log
    log = (job_dir(tmp_path) / "logs" / "cell-1.out").read_text()
    assert "attempt 1," in log and "attempt 2," in log


def test_ctrl_c_cancels_the_job(cluster, tmp_path, base_image):
    (tmp_path / "s.recipe").write_text(SLEEP_RECIPE.format(base=base_image))
    p = popen(cluster, tmp_path, "s.recipe", "--matrix", "NAME=e,f,g", "--build-arg",
              "SLEEP=60", "-j", "1")
    try:
        wait_for(lambda: (tmp_path / "jobs").exists() and any(
            (d / "cells" / "0.start").exists() for d in (tmp_path / "jobs").glob("job-*")))
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    finally:
        p.kill()
    err = (tmp_path / "err.txt").read_text()
    assert p.returncode == 1, err
    job = job_id(tmp_path)
    assert f"interrupted: Slurm job {job} cancelled" in err
    wait_for(lambda: set(slurm_states(cluster, job).values()) == {"CANCELLED"})


def test_a_cache_registry_that_is_down_costs_the_cache_not_the_cells(cluster, tmp_path):
    copy_context(tmp_path)
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()  # nothing listens there now
    cache = f"type=registry,ref=127.0.0.1:{dead}/cache:c"
    r = submit(cluster, tmp_path, "m.recipe", "--matrix", "NAME=alpha,beta", "--cache-to", cache)
    assert r.rc == 0, r
    assert r.out.startswith("matrix summary: 2 of 2 combinations built, 0 failed\n")
    logs = job_dir(tmp_path) / "logs"
    for name, own in [("seed.out", cache), ("cell-0.out", cache + "-cell0"),
                      ("cell-1.out", cache + "-cell1")]:
        log = (logs / name).read_text()
        assert f"warning: cache {cache} could not be read; building without it: " in log, log
        assert f"warning: cache export to {own},ignore-error=true failed" in log, log


def test_detach_then_matrix_status(cluster, tmp_path):
    copy_context(tmp_path)
    r = submit(cluster, tmp_path, "m.recipe", "--matrix", "NAME=alpha,beta", "--detach")
    assert r.rc == 0, r
    job = r.out.strip()
    assert job.isdigit() and job == job_id(tmp_path)
    follow = imgbuild("matrix", "status", job, "--slurm-dir", tmp_path / "jobs", "--follow",
                      store=tmp_path / "store", env=cluster)
    assert follow.rc == 0, follow
    assert follow.out.startswith("matrix summary: 2 of 2 combinations built, 0 failed\n")
    now = imgbuild("matrix", "status", job, "--slurm-dir", tmp_path / "jobs",
                   store=tmp_path / "store", env=cluster)
    assert now.rc == 0, now
    assert now.out.splitlines()[0] == f"Slurm job {job}, job directory {job_dir(tmp_path)}"
    assert now.out.split("\n", 1)[1] == follow.out
    missing = imgbuild("matrix", "status", "999999", "--slurm-dir", tmp_path / "jobs",
                       store=tmp_path / "store", env=cluster)
    assert missing.rc == 1 and "no job 999999 in" in missing.err


def test_one_build_on_slurm(cluster, tmp_path):
    copy_context(tmp_path)
    r = submit(cluster, tmp_path, "m.recipe", "--build-arg", "NAME=beta")
    assert r.rc == 0, r
    assert TIMES.sub("", NODES.sub("", r.out)).startswith(
        "matrix summary: 1 of 1 combinations built, 0 failed\n"
        "matrix 1/1: (one build): ok\n"
        "  wheel dist/beta-1.0/beta-1.0-py3-none-any.whl\n")


def test_slurm_script_lines_start_every_batch_script(cluster, tmp_path):
    copy_context(tmp_path)
    (tmp_path / "pre.sh").write_text("#!/bin/bash\n"
                                     "#SBATCH --comment=from-the-prologue\n"
                                     "echo \"prologue ran on $SLURMD_NODENAME\"\n")
    r = submit(cluster, tmp_path, "m.recipe", "--matrix", "NAME=alpha,beta", "--slurm-script",
               "pre.sh")
    assert r.rc == 0, r
    script = (job_dir(tmp_path) / "cell.sh").read_text()
    assert script.startswith("#!/bin/sh\n#SBATCH --comment=from-the-prologue\necho ")
    for i in range(2):
        log = (job_dir(tmp_path) / "logs" / f"cell-{i}.out").read_text()
        assert re.match(r"prologue ran on n[12]\n", log), log
    # its #SBATCH line counted
    assert "Comment=from-the-prologue" in slurm(cluster, "scontrol", "show", "job",
                                                job_id(tmp_path))


def test_gpu_cells_get_the_gpus_slurm_gave_them(cluster, tmp_path, base_image):
    fake = tmp_path / "fake-driver"
    subprocess.run(["bash", str(ROOT / "tests/fixtures/gpu/make_fake_driver.sh"), str(fake)],
                   check=True)
    (tmp_path / "g.recipe").write_text(
        f"FROM {base_image}\n"
        "ARG NAME=a\n"
        "RUN --device=nvidia.com/gpu=all sh -c "
        "'ls /dev | grep -E \"^nvidia[0-9]\" > /gpus; echo $NAME >> /gpus; sleep 4'\n"
        "OUTPUT type=local,dest=out-${NAME},src=/gpus\n")
    env = {"IMGBUILD_NVIDIA_ROOT": str(fake), "IMGBUILD_LDCONFIG": str(fake / "ldconfig")}
    r = submit(cluster, tmp_path, "g.recipe", "--matrix", "NAME=a,b", "-j", "2",
               "--slurm-opt=--partition=gpu", env=env)
    assert r.rc == 0, r
    # imgbuild asked for one GPU per task (the recipe's RUN --device)
    script_opts = slurm(cluster, "scontrol", "show", "job", job_id(tmp_path))
    assert "gres/gpu=1" in script_opts or "gres:gpu:1" in script_opts, script_opts
    got = [(tmp_path / f"out-{n}" / "gpus").read_text().split() for n in "ab"]
    # each cell saw exactly one GPU, and not the other cell's
    assert [g[1] for g in got] == ["a", "b"]
    assert sorted(g[0] for g in got) == ["nvidia0", "nvidia1"], got


def test_slurm_option_errors(cluster, tmp_path):
    copy_context(tmp_path)
    for args, msg in [
        (["--detach"], "build: --detach goes with --slurm"),
        (["--slurm-opt=-N1"], "build: --slurm-opt goes with --slurm"),
        (["--slurm", "--debug-shell"], "build: --debug-shell needs a terminal here"),
        (["--shared-only"], "build: --shared-only goes with --matrix"),
    ]:
        r = imgbuild("build", "m.recipe", *args, store=tmp_path / "store", cwd=tmp_path,
                     env=cluster)
        assert r.rc == 2 and msg in r.err, (args, r)
    r = imgbuild("build", "-f", "-", ".", "--slurm", store=tmp_path / "store", cwd=tmp_path,
                 env=cluster, input=COPY_RECIPE)
    assert r.rc == 2 and "the tasks cannot read the recipe from this stdin" in r.err, r
    # a broken recipe is refused here, before anything is queued
    (tmp_path / "bad.recipe").write_text("FROM scratch\nRUNN x\n")
    r = submit(cluster, tmp_path, "bad.recipe", "--matrix", "X=1,2")
    assert r.rc == 1 and "unknown instruction 'RUNN'" in r.err, r
    assert not (tmp_path / "jobs").exists() or not list((tmp_path / "jobs").glob("job-*"))


if os.geteuid() == 0:
    def test_an_unprivileged_user_submits_to_roots_cluster(tmp_path):
        """The usual site: slurmd runs as root, a user submits; the user's
        tasks run as the user (their stores are the user's)."""
        import pwd
        import shutil
        import tempfile
        user = os.environ.get("IMGBUILD_TEST_USER", "imgbuild-test")
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True)
            pw = pwd.getpwnam(user)
        # everything the user reads or writes in a directory it can reach
        top = Path(tempfile.mkdtemp(prefix="imgbuild-slurm-user."))
        try:
            os.chmod(top, 0o755)
            cl = top / "cluster"
            cl.mkdir()
            subprocess.run(["bash", str(ROOT / "tests/lib/slurm.sh"), "start", str(cl)],
                           check=True)
            try:
                work = top / "work"
                copy_context(work)
                binary = top / "imgbuild"
                shutil.copy(IMGBUILD, binary)
                os.chmod(binary, 0o755)
                subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", str(work)], check=True)
                r = subprocess.run(
                    ["runuser", "-u", user, "--", "env", f"SLURM_CONF={cl}/slurm.conf",
                     "IMGBUILD_SLURM_POLL=0.3", f"HOME={pw.pw_dir}", str(binary), "--store",
                     f"{work}/store", "build", "m.recipe", *MATRIX, "-j", "2", "--slurm",
                     "--slurm-dir", f"{work}/jobs", "--slurm-store", f"{work}/stores/%n"],
                    cwd=work, capture_output=True, text=True, timeout=300)
                assert r.returncode == 0, r.stdout + r.stderr
                assert r.stdout.startswith("matrix summary: 4 of 4 combinations built, 0 failed\n")
                # the tasks ran as the user: what they wrote is the user's
                for p in [*(work / "stores").iterdir(), *(work / "dist").iterdir()]:
                    assert p.stat().st_uid == pw.pw_uid, p
                (jd,) = (work / "jobs").glob("job-*")
                assert (jd / "cells" / "0.json").stat().st_uid == pw.pw_uid
            finally:
                subprocess.run(["bash", str(ROOT / "tests/lib/slurm.sh"), "stop", str(cl)])
        finally:
            shutil.rmtree(top, ignore_errors=True)
