"""Layers compressed in the background: a step whose layer is large writes
its tar first (the following steps' keys need only its diff_id) and a
child process compresses it while the next steps run.  The blob must be
the tar compressed, recorded in the cache once it is stored, kept for the
next build when a later step fails, and a full disk meeting the
compression must fail the build naming the step and leave the store as
it was."""
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import IMGBUILD, imgbuild, write
from test_store_robust import check_store

# About 10 MB of text (more than the 4 MiB above which a layer is
# compressed in the background), the same bytes every time.
BIG = "RUN busybox seq 1 1500000 > /big"


def scratch_ctx(tmp_path, body):
    ctx = tmp_path / "ctx"
    ctx.mkdir(exist_ok=True)
    shutil.copy("/bin/busybox", ctx / "busybox")
    write(ctx / "r.recipe", "FROM scratch\nCOPY busybox /bin/busybox\nCOPY busybox /bin/sh\n" + body)
    return ctx


def inspect(store, ref):
    r = imgbuild("inspect", ref, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)


def blob(store, digest):
    return (Path(store) / "blobs/sha256" / digest.split(":")[1]).read_bytes()


def test_background_layer_is_the_tar_compressed_and_cached(tmp_path):
    ctx = scratch_ctx(tmp_path, f"{BIG}\nRUN echo after > /after\n")
    sg, sn = tmp_path / "gz", tmp_path / "none"
    r = imgbuild("build", "--reproducible", ctx / "r.recipe", "-t", "jobs:gz", store=sg)
    assert r.rc == 0, r
    # the big layer's line comes when its compression is joined
    lines = [l for l in r.err.splitlines() if "written in" in l]
    assert len(lines) == 4, r.err
    n = imgbuild("build", "--reproducible", "--compression", "none", ctx / "r.recipe",
                 "-t", "jobs:none", store=sn)
    assert n.rc == 0, n
    check_store(sg)
    gz, none = inspect(sg, "jobs:gz"), inspect(sn, "jobs:none")
    assert gz["config"]["rootfs"]["diff_ids"] == none["config"]["rootfs"]["diff_ids"]
    for lg, ln, diff_id in zip(gz["manifest"]["layers"], none["manifest"]["layers"],
                               gz["config"]["rootfs"]["diff_ids"]):
        assert lg["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        data = blob(sg, lg["digest"])
        assert len(data) == lg["size"]
        assert data[:10] == bytes([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3])
        tar = gzip.decompress(data)
        # the same tar as the uncompressed build's layer, one pass
        assert tar == blob(sn, ln["digest"])
        assert "sha256:" + hashlib.sha256(tar).hexdigest() == diff_id
    big = gzip.decompress(blob(sg, gz["manifest"]["layers"][2]["digest"]))
    assert len(big) > 10_000_000
    r = imgbuild("run", "jobs:gz", "--", "/bin/busybox", "tail", "-n", "1", "/big", store=sg)
    assert r.rc == 0 and r.out == "1500000\n", r

    # the records were written once the blob was stored: a rebuild runs
    # nothing and gives the same image
    again = imgbuild("build", "--reproducible", ctx / "r.recipe", "-t", "jobs:gz", store=sg)
    assert again.rc == 0, again
    assert "(4 steps cached, 0 run)" in again.err, again.err
    assert inspect(sg, "jobs:gz")["manifest"] == gz["manifest"]


def test_a_failed_step_keeps_the_background_layer_cached(tmp_path):
    ctx = scratch_ctx(tmp_path, f"{BIG}\nRUN echo broken; exit 3\n")
    store = tmp_path / "s"
    r = imgbuild("build", ctx / "r.recipe", "-t", "jobs:f", store=store)
    assert r.rc != 0 and "exit status 3" in r.err, r
    check_store(store)
    # fixed: the big step comes from the cache (its record was written
    # after its layer, though the build failed)
    write(ctx / "r.recipe", (ctx / "r.recipe").read_text().replace("echo broken; exit 3",
                                                                   "echo fixed > /fixed"))
    r = imgbuild("build", ctx / "r.recipe", "-t", "jobs:f", store=store)
    assert r.rc == 0, r
    assert "[stage-0 4/5] RUN busybox seq 1 1500000 > /big CACHED" in r.err, r.err
    assert "(3 steps cached, 1 run)" in r.err, r.err
    check_store(store)


def in_small_tmpfs(tmp_path, size, script):
    """Run `script` (sh) with a tmpfs of `size` at $M, in a mount namespace
    of its own (root) or a user namespace (a user); None when this machine
    does not let us mount one."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    ns = ["unshare", "--mount"] if os.geteuid() == 0 else \
        ["unshare", "--map-root-user", "--map-auto", "--mount"]
    full = f"set -u\nmount -t tmpfs -o size={size} tmpfs {mnt} || exit 77\nM={mnt}\n{script}"
    r = subprocess.run([*ns, "sh", "-c", full], capture_output=True, text=True, timeout=600)
    if r.returncode == 77 or "mount: " in r.stderr and "permission denied" in r.stderr.lower():
        return None
    return r


SMALL = """FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "sh", "-c", "echo small > /small"]
OUTPUT type=image,name=jobs-small:latest
"""

CHECK = """
python3 - $S <<'EOF'
import sys
sys.path.insert(0, %r)
from test_store_robust import check_store
check_store(sys.argv[1])
print("store ok")
EOF
%s --store $S build {ctx}/small.recipe > {tmp}/small.out 2>&1; echo "small rc=$?"
%s --store $S run jobs-small:latest -- /bin/busybox cat /small
"""


def test_full_disk_while_compressing_fails_naming_the_step(tmp_path):
    """A 60 MB incompressible layer leaves room for its tar and blob, so it
    is compressed in the background (zlib level 9: seconds); the next step
    fills the file system meanwhile (a cache mount in the store), then
    frees it.  The compression meets the full disk: the build fails naming
    the step whose layer it was, and nothing of it stays."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    ctx = scratch_ctx(tmp_path, """RUN busybox head -c 60000000 /dev/urandom > /big
RUN --mount=type=cache,target=/c,id=fill busybox sh -c 'busybox head -c 1000000000 /dev/zero > /c/fill; busybox sleep 6; busybox rm -f /c/fill'
OUTPUT type=image,name=jobs-big:latest
""")
    write(ctx / "small.recipe", SMALL)
    here = str(Path(__file__).resolve().parent)
    script = f"""
S=$M/store
{IMGBUILD} --store $S build --compression gzip --compression-level 9 {ctx}/r.recipe > {tmp_path}/big.out 2>&1; echo "big rc=$?"
ls $S/tmp 2>/dev/null | wc -l | sed 's/^/tmp files /'
""" + (CHECK % (here, IMGBUILD, IMGBUILD)).format(ctx=ctx, tmp=tmp_path)
    r = in_small_tmpfs(tmp_path, "256m", script)
    if r is None:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    big = (tmp_path / "big.out").read_text()
    assert "big rc=1" in r.stdout, (r.stdout, r.stderr, big)
    assert "No space left on device" in big, big
    assert "r.recipe:4: RUN" in big, big          # the step whose layer it was
    assert "tmp files 0" in r.stdout, r.stdout   # no tar or partial blob left
    assert "store ok" in r.stdout, (r.stdout, r.stderr)
    assert "small rc=0" in r.stdout, (r.stdout, (tmp_path / "small.out").read_text())
    assert r.stdout.endswith("small\n"), r.stdout


def test_a_tar_too_large_for_the_disk_falls_back_to_one_pass(tmp_path):
    """24 MB of text in a 40 MiB file system: the tree and its tar do not
    fit together, the compressed blob does; the layer is written in one
    pass and the build succeeds."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    ctx = scratch_ctx(tmp_path, """RUN busybox seq 1 3400000 > /big
OUTPUT type=image,name=jobs-fit:latest
""")
    script = f"""
S=$M/store
{IMGBUILD} --store $S build {ctx}/r.recipe > {tmp_path}/fit.out 2>&1; echo "fit rc=$?"
{IMGBUILD} --store $S run jobs-fit:latest -- /bin/busybox tail -n 1 /big
"""
    r = in_small_tmpfs(tmp_path, "40m", script)
    if r is None:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    out = (tmp_path / "fit.out").read_text()
    assert "fit rc=0" in r.stdout, (r.stdout, r.stderr, out)
    assert r.stdout.endswith("3400000\n"), (r.stdout, r.stderr)


def test_local_output_does_not_wait_for_the_compression(tmp_path):
    """OUTPUT type=local reads the stage's tree, not its image: it comes
    before the stage's big layer is compressed (its layer line), and the
    next stage runs meanwhile; the records are all there afterwards."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy("/bin/busybox", ctx / "busybox")
    dest = tmp_path / "dest"
    write(ctx / "r.recipe", f"""FROM scratch AS gen
COPY busybox /bin/busybox
COPY busybox /bin/sh
{BIG} && echo made > /out.txt
OUTPUT type=local,src=/out.txt,dest={dest}
FROM scratch
COPY --from=gen /out.txt /out.txt
OUTPUT type=image,name=jobs-local:latest
""")
    store = tmp_path / "s"
    r = imgbuild("build", ctx / "r.recipe", store=store)
    assert r.rc == 0, r
    lines = r.err.splitlines()
    local = next(i for i, l in enumerate(lines) if "OUTPUT local" in l)
    big = next(i for i, l in enumerate(lines)
               if (m := re.search(r"entries, ([0-9.]+) kB, written in", l)) and float(m[1]) > 2500)
    image = next(i for i, l in enumerate(lines) if "OUTPUT image" in l)
    assert local < image < big, r.err
    assert (dest / "out.txt").read_text() == "made\n"
    check_store(store)
    again = imgbuild("build", ctx / "r.recipe", store=store)
    assert again.rc == 0 and "(4 steps cached, 0 run)" in again.err, again
