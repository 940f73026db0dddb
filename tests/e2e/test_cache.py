"""The build cache on the Debian base image: a rebuild without changes runs
nothing and gives the same image; a change to a COPY'd file, a build arg or
a bind-mounted context file reruns from that step on, not before;
--no-cache and --no-cache-filter; damaged records; `imgbuild prune`."""
import json
import os
import re
from pathlib import Path

import pytest

from conftest import imgbuild, sh, write


def steps(result):
    """{"[stage i/n] KEYWORD ...": cached?} in the order printed."""
    out = []
    for line in result.err.splitlines():
        m = re.match(r"^\[(\S+ \d+/\d+)\] (.*?)( CACHED)?$", line)
        if m and not m.group(2).startswith("OUTPUT"):
            out.append((m.group(1), m.group(2).split(" ")[0], bool(m.group(3))))
    return out


def cached_flags(result):
    return [(s, c) for s, kw, c in steps(result) if kw != "FROM"]


def inspect(store, ref):
    r = imgbuild("inspect", ref, store=store)
    assert r.rc == 0, r
    return json.loads(r.out)


def layers(store, ref):
    return [l["digest"] for l in inspect(store, ref)["manifest"]["layers"]]


def cat(store, ref, path):
    r = imgbuild("run", ref, "--", "cat", path, store=store)
    assert r.rc == 0, r
    return r.out


@pytest.fixture(scope="module")
def cstore(tmp_path_factory, registry, base_image):
    store = tmp_path_factory.mktemp("cache-store")
    assert imgbuild("pull", base_image, store=store).rc == 0
    return store


RECIPE = """
FROM {base} AS build
ARG FLAVOUR=plain
RUN head -c 16 /dev/urandom | od -An -tx1 > /before-copy
ENV STAGE=build
COPY src/ /src/
RUN cat /src/a.txt > /after-copy && echo "$FLAVOUR" > /flavour && head -c 8 /dev/urandom | od -An -tx1 >> /after-copy
LABEL org.example.step=last

FROM {base} AS client
COPY --from=build /after-copy /flavour /opt/
RUN head -c 8 /dev/urandom | od -An -tx1 > /client-random
CMD ["cat", "/opt/after-copy"]
OUTPUT type=image,name=cache-client:latest
"""


@pytest.fixture
def ctx(tmp_path, base_image):
    c = tmp_path / "ctx"
    write(c / "src/a.txt", "first version\n")
    write(c / "src/b.txt", "unchanged\n")
    write(c / "r.recipe", RECIPE.format(base=base_image))
    return c


def build(store, ctx, *extra):
    r = imgbuild("build", ctx / "r.recipe", *extra, store=store)
    assert r.rc == 0, r
    return r


def test_noop_rebuild_runs_nothing_and_gives_the_same_image(cstore, ctx):
    first = build(cstore, ctx, "--no-cache")
    assert all(not c for _, c in cached_flags(first)), first.err
    m1 = inspect(cstore, "cache-client:latest")
    random1 = cat(cstore, "cache-client:latest", "/client-random")

    again = build(cstore, ctx)
    flags = cached_flags(again)
    # build: RUN, ENV, COPY, RUN, LABEL; client: COPY, RUN, CMD
    assert len(flags) == 8, again.err
    assert all(c for _, c in flags), again.err
    assert "(8 steps cached, 0 run)" in again.err
    m2 = inspect(cstore, "cache-client:latest")
    assert m2 == m1  # same manifest, same config (history times kept)
    # nothing ran: the random bytes written by RUN are the same
    assert cat(cstore, "cache-client:latest", "/client-random") == random1


def test_copy_change_reruns_from_that_step_not_before(cstore, ctx):
    build(cstore, ctx)
    before = layers(cstore, "cache-client:latest")
    write(ctx / "src/a.txt", "second version\n")
    r = build(cstore, ctx)
    flags = dict(cached_flags(r))
    assert flags["build 2/6"] is True      # RUN before the COPY
    assert flags["build 3/6"] is True      # ENV
    assert flags["build 4/6"] is False     # COPY src/
    assert flags["build 5/6"] is False     # RUN after it
    assert flags["build 6/6"] is False     # LABEL after it
    assert flags["client 2/4"] is False    # COPY --from=build: its source changed
    assert cat(cstore, "cache-client:latest", "/opt/after-copy").startswith("second version\n")
    after = layers(cstore, "cache-client:latest")
    assert after[:-2] == before[:-2]       # the base's layers
    assert after[-2:] != before[-2:]

    # touching a file (mtime only) keeps the cache; a mode change does not
    os.utime(ctx / "src/b.txt", (1000000000, 1000000000))
    r = build(cstore, ctx)
    assert all(c for _, c in cached_flags(r)), r.err
    (ctx / "src/b.txt").chmod(0o755)
    r = build(cstore, ctx)
    assert dict(cached_flags(r))["build 4/6"] is False
    # a new file in a copied directory too
    write(ctx / "src/new.txt", "n\n")
    r = build(cstore, ctx)
    assert dict(cached_flags(r))["build 4/6"] is False
    r = build(cstore, ctx)
    assert all(c for _, c in cached_flags(r)), r.err


def test_build_arg_change_reruns_the_runs_that_see_it(cstore, ctx):
    build(cstore, ctx)
    r = build(cstore, ctx, "--build-arg", "FLAVOUR=cuda")
    flags = dict(cached_flags(r))
    # ARG values are RUN's environment: the first RUN after the ARG reruns
    assert flags["build 2/6"] is False
    assert cat(cstore, "cache-client:latest", "/opt/flavour") == "cuda\n"
    r = build(cstore, ctx, "--build-arg", "FLAVOUR=cuda")
    assert all(c for _, c in cached_flags(r)), r.err
    # back to the default: the first records are still there
    r = build(cstore, ctx)
    assert all(c for _, c in cached_flags(r)), r.err
    assert cat(cstore, "cache-client:latest", "/opt/flavour") == "plain\n"


def test_no_cache_filter_reruns_one_stage(cstore, ctx):
    build(cstore, ctx)
    r = build(cstore, ctx, "--no-cache-filter", "client")
    flags = dict(cached_flags(r))
    assert all(v for k, v in flags.items() if k.startswith("build ")), r.err
    assert not any(v for k, v in flags.items() if k.startswith("client ")), r.err
    # the build stage rerun (random bytes): its new layers change what the
    # client stage's COPY --from is keyed on, so the client reruns too
    r = build(cstore, ctx, "--no-cache-filter", "build")
    flags = dict(cached_flags(r))
    assert not any(v for k, v in flags.items() if k.startswith("build ")), r.err
    assert flags["client 2/4"] is False, r.err
    r = imgbuild("build", ctx / "r.recipe", "--no-cache-filter", "nosuch", store=cstore)
    assert r.rc != 0
    assert "--no-cache-filter nosuch:" in r.err and "no stage of that name" in r.err


def test_stage_rerun_with_the_same_bytes_keeps_later_hits(cstore, tmp_path, base_image):
    c = tmp_path / "ctx"
    write(c / "r.recipe", f"""
FROM {base_image} AS gen
RUN echo deterministic > /out.txt
FROM {base_image}
COPY --from=gen /out.txt /opt/out.txt
RUN head -c 8 /dev/urandom | od -An -tx1 > /rand
OUTPUT type=image,name=cache-same:latest
""")
    r = imgbuild("build", c / "r.recipe", "--reproducible", store=cstore)
    assert r.rc == 0, r
    rand = cat(cstore, "cache-same:latest", "/rand")
    r = imgbuild("build", c / "r.recipe", "--reproducible", "--no-cache-filter", "gen", store=cstore)
    assert r.rc == 0, r
    flags = dict(cached_flags(r))
    assert flags["gen 2/2"] is False
    assert flags["stage-1 2/3"] is True and flags["stage-1 3/3"] is True, r.err
    assert cat(cstore, "cache-same:latest", "/rand") == rand


def test_bind_mount_source_is_part_of_the_key(cstore, tmp_path, base_image):
    c = tmp_path / "ctx"
    write(c / "data/v", "one\n")
    write(c / "r.recipe", f"""
FROM {base_image}
RUN --mount=type=bind,source=data,target=/d cp /d/v /v
OUTPUT type=image,name=cache-bind:latest
""")
    assert imgbuild("build", c / "r.recipe", store=cstore).rc == 0
    r = imgbuild("build", c / "r.recipe", store=cstore)
    assert all(v for _, v in cached_flags(r)), r.err
    write(c / "data/v", "two\n")
    r = imgbuild("build", c / "r.recipe", store=cstore)
    assert r.rc == 0, r
    assert not any(v for _, v in cached_flags(r)), r.err
    assert cat(cstore, "cache-bind:latest", "/v") == "two\n"


def test_damaged_record_is_a_miss_and_build_succeeds(tmp_path, registry, base_image):
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    write(c / "r.recipe", f"""
FROM {base_image}
RUN echo a > /a
RUN echo b > /b
OUTPUT type=image,name=cache-dmg:latest
""")
    assert imgbuild("build", c / "r.recipe", store=store).rc == 0
    recs = sorted((store / "cache/steps").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert len(recs) == 2
    recs[0].write_text('{"v":1,"conf')  # a torn write
    r = imgbuild("build", c / "r.recipe", store=store)
    assert r.rc == 0, r
    assert "ignoring the malformed record" in r.err
    assert cat(store, "cache-dmg:latest", "/b") == "b\n"
    # the record was written again: the next build hits everything
    r = imgbuild("build", c / "r.recipe", store=store)
    assert all(v for _, v in cached_flags(r)), r.err


def test_prune(tmp_path, registry, base_image):
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    write(c / "r.recipe", f"""
FROM {base_image} AS tmp
RUN head -c 300000 /dev/urandom > /big
FROM {base_image}
RUN --mount=type=cache,target=/cache echo x > /cache/x && echo kept > /kept
OUTPUT type=image,name=cache-prune:latest
""")
    assert imgbuild("build", c / "r.recipe", "--target", "tmp", store=store).rc == 0
    assert imgbuild("build", c / "r.recipe", store=store).rc == 0
    (store / "tmp" / "stage-dead").mkdir()  # what a killed build leaves
    (store / "tmp" / "stage-dead" / "f").write_bytes(b"x" * 10000)

    r = imgbuild("prune", store=store)
    assert r.rc == 0, r
    assert re.search(r"temporary files: +1 removed", r.out), r.out
    # the cache keeps the intermediate stage's layer
    assert re.search(r"unreferenced blobs: +\d+ removed", r.out)
    assert "Total reclaimed space:" in r.out
    assert not (store / "tmp" / "stage-dead").exists()
    r = imgbuild("build", c / "r.recipe", "--target", "tmp", store=store)
    assert all(v for _, v in cached_flags(r)), r.err

    r = imgbuild("prune", "--cache", store=store)
    assert r.rc == 0, r
    m = re.search(r"build cache: +(\d+) step records, (\d+) cache mounts removed", r.out)
    assert m and int(m.group(1)) == 2 and int(m.group(2)) == 1, r.out  # one RUN per stage
    m = re.search(r"unreferenced blobs: +(\d+) removed, (\S+)", r.out)
    assert m and int(m.group(1)) >= 1, r.out   # the 300 kB layer of stage tmp
    assert not any((store / "cache/steps").iterdir())
    # tagged images are untouched and still run
    assert cat(store, "cache-prune:latest", "/kept") == "kept\n"
    assert imgbuild("run", base_image, "--", "true", store=store).rc == 0
    # and a build after prune runs its steps again
    r = imgbuild("build", c / "r.recipe", store=store)
    assert r.rc == 0, r
    assert not any(v for _, v in cached_flags(r)), r.err

    r = imgbuild("prune", "--all", store=store)
    assert r.rc == 0, r
    assert not any((store / "snapshots").iterdir())
    assert cat(store, "cache-prune:latest", "/kept") == "kept\n"
    # nothing left to remove
    r = imgbuild("prune", store=store)
    assert "Total reclaimed space: 0B" in r.out, r.out


def human_bytes(text):
    """ib_human_size's "12.3MB" (powers of 1000) as bytes."""
    m = re.fullmatch(r"([\d.]+)(B|kB|MB|GB)", text)
    return float(m[1]) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[m[2]]


def test_prune_keep_storage_drops_the_least_recently_used(tmp_path, registry, base_image):
    """--keep-storage: step records go oldest use first (a cache hit is a
    use), with the layers and trees only they hold, until the store fits;
    tagged images stay even when they alone are over the budget."""
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    write(c / "r.recipe", f"""
FROM {base_image}
ARG N
RUN head -c 2000000 /dev/urandom > /big-$N
""")
    def build(n):
        r = imgbuild("build", c / "r.recipe", "--build-arg", f"N={n}", store=store)
        assert r.rc == 0, r
        return all(v for _, v in cached_flags(r))
    for n in (1, 2, 3):
        assert not build(n)
    assert build(1)  # used again: now the most recent, 2 the least
    r = imgbuild("prune", "--keep-storage", "1000GB", store=store)
    assert r.rc == 0, r
    assert re.search(r"build cache: +0 step records", r.out), r.out
    size = human_bytes(re.search(r"Store after prune: +(\S+) \(--keep-storage 1000\.00GB\)",
                                 r.out)[1])
    # a budget past what 64 bits hold is no budget, not a negative one
    r = imgbuild("prune", "--keep-storage", str(2**64 - 1), store=store)
    assert r.rc == 0 and re.search(r"build cache: +0 step records", r.out), r
    assert "tagged images hold more" not in r.out, r.out
    # a budget 1 MB under what is there: the oldest record goes (its 2 MB
    # layer and its 2 MB tree), and no other
    r = imgbuild("prune", "--keep-storage", str(int(size - 1e6)), store=store)
    assert r.rc == 0, r
    assert re.search(r"build cache: +1 step records, 0 cache mounts removed", r.out), r.out
    assert re.search(r"unreferenced blobs: +1 removed", r.out), r.out
    after = human_bytes(re.search(r"Store after prune: +(\S+) ", r.out)[1])
    assert size - 6e6 < after <= size - 1e6, (size, after)
    assert build(1) and build(3)
    assert not build(2)
    # a budget the tagged base image alone exceeds: every record goes
    r = imgbuild("prune", "--keep-storage", "1", store=store)
    assert r.rc == 0, r
    assert re.search(r"build cache: +3 step records", r.out), r.out
    assert "(--keep-storage 1B: tagged images hold more)" in r.out, r.out
    assert not any((store / "cache/steps").iterdir())
    assert imgbuild("run", base_image, "--", "true", store=store).rc == 0
    for args, msg in [(["--keep-storage", "lots"], "prune: --keep-storage: "),
                      (["--keep-storage", "1G", "--cache"],
                       "prune: --keep-storage keeps part of the build cache; --cache removes "
                       "all of it")]:
        r = imgbuild("prune", *args, store=store)
        assert r.rc == 2 and msg in r.err, (args, r)


def test_prune_waits_for_a_running_build(tmp_path, registry, base_image):
    import subprocess
    import time
    from conftest import IMGBUILD
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    write(c / "r.recipe", f"""
FROM {base_image}
RUN sleep 3 && echo done > /done
OUTPUT type=image,name=cache-wait:latest
""")
    assert imgbuild("pull", base_image, store=store).rc == 0
    b = subprocess.Popen([str(IMGBUILD), "--store", str(store), "build", str(c / "r.recipe")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    r = imgbuild("prune", "--all", store=store)
    out, err = b.communicate(timeout=120)
    assert b.returncode == 0, err
    assert r.rc == 0, r
    assert "waiting for the builds" in r.err
    assert cat(store, "cache-wait:latest", "/done") == "done\n"


def test_step_progress_plain_and_json(tmp_path, registry, base_image):
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    write(c / "r.recipe", f"""
FROM {base_image} AS one
RUN echo first-line && echo second-line
ENV X=1
OUTPUT type=image,name=cache-progress:latest
""")
    r = imgbuild("--progress", "plain", "build", c / "r.recipe", store=store)
    assert r.rc == 0, r
    lines = r.err.splitlines()
    i = lines.index("[one 2/3] RUN echo first-line && echo second-line")
    assert lines[i + 1:i + 3] == ["first-line", "second-line"], lines
    assert any(re.fullmatch(r"\[one 2/3\] DONE \d+\.\ds", l) for l in lines), lines
    assert "[one 3/3] ENV X=1" in lines
    # JSON: one item per step, CACHED as the final status on a hit, the
    # command's output as message events of the build's display
    r = imgbuild("--progress", "json", "build", "--no-cache-filter", "one", c / "r.recipe",
                 store=store)
    assert r.rc == 0, r
    ev = [json.loads(l) for l in r.err.splitlines() if l.startswith("{")]
    mine = [e for e in ev if e["title"] == f"build {c / 'r.recipe'}"]
    msgs = [e["message"] for e in mine if e["event"] == "message"]
    assert "[one 2/3] first-line" in msgs and "[one 2/3] second-line" in msgs, mine
    done = {e["id"]: e["status"] for e in mine if e["event"] == "done"}
    assert re.fullmatch(r"DONE \d+\.\ds", done["[one 2/3] RUN echo first-line && echo second-line"])
    assert done["[one 1/3] FROM " + base_image] == "DONE"
    r = imgbuild("--progress", "json", "build", c / "r.recipe", store=store)
    ev = [json.loads(l) for l in r.err.splitlines() if l.startswith("{")]
    done = {e["id"]: e["status"] for e in ev if e["event"] == "done"}
    assert done["[one 2/3] RUN echo first-line && echo second-line"] == "CACHED", ev
    assert done["[one 3/3] ENV X=1"] == "CACHED"


def test_keep_on_failure_and_debug_shell(tmp_path, registry, base_image):
    import subprocess
    from conftest import IMGBUILD
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    write(c / "fail.recipe", f"""
FROM {base_image}
WORKDIR /w
ENV FOO=bar
RUN echo partial > /w/partial && exit 3
""")
    r = imgbuild("build", "--keep-on-failure", c / "fail.recipe", store=store)
    assert r.rc == 1
    assert "fail.recipe:5: RUN: echo partial > /w/partial && exit 3: exit status 3" in r.err
    m = re.search(r"to look around in it:\n  imgbuild --store '[^']+' run --rootfs '([^']+)' -w '/w' "
                  r"-e 'FOO=bar' -- /bin/sh", r.err)
    assert m, r.err
    kept = m.group(1)
    # the printed command enters the failed step's tree, with its changes
    r = imgbuild("run", "--rootfs", kept, "-w", "/w", "-e", "FOO=bar", "--", "sh", "-c",
                 "cat partial; echo $FOO; pwd", store=store)
    assert r.rc == 0, r
    assert r.out == "partial\nbar\n/w\n"
    # prune takes it away with the other leftovers
    assert imgbuild("prune", store=store).rc == 0
    assert not os.path.exists(kept)
    # --debug-shell on a terminal: a shell there, then the build fails as before
    cmd = f"{IMGBUILD} --store {store} build --debug-shell {c / 'fail.recipe'}"
    p = subprocess.run(["script", "-qec", cmd, "/dev/null"], input="cat /w/partial; echo $FOO\nexit\n",
                       capture_output=True, text=True, timeout=300)
    assert "--debug-shell: a shell in the failed step's tree" in p.stdout, p.stdout
    assert re.search(r"partial\r?\nbar\r?\n", p.stdout), p.stdout
    assert p.returncode == 1
    # without a terminal it only says what to run
    r = imgbuild("build", "--debug-shell", c / "fail.recipe", store=store)
    assert r.rc == 1 and "stdin is not a terminal: run the command above instead" in r.err, r.err
    # with -j on a terminal too: the stages' processes share it
    cmd = f"{IMGBUILD} --store {store} build -j 2 --debug-shell {c / 'fail.recipe'}"
    p = subprocess.run(["script", "-qec", cmd, "/dev/null"], input="echo typed-in-a-shell\nexit\n",
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout
    assert "with -j the stages share the terminal: run the command above instead" in p.stdout, p.stdout
    assert "a shell in the failed step's tree" not in p.stdout, p.stdout
    # the command on a line of its own, though the warning came through the display
    assert re.search(r"to look around in it:(\x1b\[K)?\r?\n  imgbuild --store ", p.stdout), p.stdout
    assert "fail.recipe:5: RUN: echo partial > /w/partial && exit 3: exit status 3" in p.stdout, p.stdout


def test_jobs_run_independent_stages_at_once(tmp_path, registry, base_image):
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    write(c / "r.recipe", f"""
FROM {base_image} AS a
RUN date +%s.%N > /a-start && sleep 2 && date +%s.%N > /a-end
FROM {base_image} AS b
RUN date +%s.%N > /b-start && sleep 2 && date +%s.%N > /b-end
FROM {base_image} AS final
COPY --from=a /a-start /a-end /t/
COPY --from=b /b-start /b-end /t/
OUTPUT type=image,name=cache-jobs:latest
""")
    r = imgbuild("build", "-j", "2", c / "r.recipe", store=store)
    assert r.rc == 0, r
    t = {n: float(cat(store, "cache-jobs:latest", f"/t/{n}")) for n in ("a-start", "a-end", "b-start", "b-end")}
    # the two stages' RUNs overlapped in time
    assert t["a-start"] < t["b-end"] and t["b-start"] < t["a-end"], t
    first = inspect(store, "cache-jobs:latest")
    # the same build one stage at a time takes everything from the cache
    r = imgbuild("build", c / "r.recipe", store=store)
    assert r.rc == 0 and "(4 steps cached, 0 run)" in r.err, r.err
    assert inspect(store, "cache-jobs:latest") == first
    r = imgbuild("build", "-j", "4", c / "r.recipe", store=store)
    assert r.rc == 0 and "(4 steps cached, 0 run)" in r.err, r.err
    # JSON progress with -j: each stage's process emits its own events,
    # whole lines, one add and one done per step, ids unique across stages
    r = imgbuild("--progress", "json", "build", "-j", "2", "--no-cache", c / "r.recipe", store=store)
    assert r.rc == 0, r
    events = [json.loads(l) for l in r.err.splitlines() if l.startswith("{")]
    added = [e["id"] for e in events if e["event"] == "add"]
    done = [e["id"] for e in events if e["event"] == "done"]
    assert sorted(added) == sorted(done) and len(set(added)) == len(added), events
    assert {i.split(" ")[0] for i in added} == {"[a", "[b", "[final"}, added
    assert sum(1 for i in added if " RUN " in i) == 2, added
    assert all(e["ok"] for e in events if e["event"] == "done"), events
    # a failing stage fails the build with its own message; the final stage
    # never starts
    write(c / "bad.recipe", f"""
FROM {base_image} AS a
RUN sleep 1 && exit 4
FROM {base_image} AS b
RUN sleep 30
FROM {base_image}
COPY --from=a / /a
COPY --from=b / /b
""")
    r = imgbuild("build", "-j", "2", c / "bad.recipe", store=store, timeout=60)
    assert r.rc == 1, r
    assert "bad.recipe:3: RUN: sleep 1 && exit 4: exit status 4" in r.err, r.err
    assert "[stage-2" not in r.err
    r = imgbuild("build", "-j", "0", c / "r.recipe", store=store)
    assert r.rc == 2 and "--jobs: expected a number from 1 to 64, got '0'" in r.err


def test_jobs_pull_a_shared_base_once(tmp_path, registry, base_image, faultproxy):
    """-j 2 on an empty store, two stages FROM one image and a third FROM
    another name of it: the shared image is pulled once, before the stages
    start (each stage's process would download it by itself); the image
    only one stage uses is pulled by that stage."""
    proxy = faultproxy([])
    repo = base_image.split("/", 1)[1]
    shared = f"{proxy.host}/{repo}"
    sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"docker://{base_image}",
       f"docker://{registry}/jobs-other:1", "--src-tls-verify=false")
    other = f"{proxy.host}/jobs-other:1"
    store = tmp_path / "store"
    c = tmp_path / "ctx"
    write(c / "r.recipe", f"""
FROM {shared} AS a
RUN echo a > /a
FROM {shared} AS b
RUN echo b > /b
FROM {other}
COPY --from=a /a /t/
COPY --from=b /b /t/
OUTPUT type=image,name=jobs-pull:latest
""")
    r = imgbuild("build", "-j", "2", c / "r.recipe", store=store)
    assert r.rc == 0, r
    assert cat(store, "jobs-pull:latest", "/t/a") == "a\n" and cat(store, "jobs-pull:latest", "/t/b") == "b\n"
    log = proxy.log()
    seen = [(e["method"], e["path"], e["status"]) for e in log]
    shared_blobs = [e for e in log if e["method"] == "GET" and e["path"].startswith(f"/v2/{repo.split(':')[0]}/blobs/")]
    manifest = [e for e in log if e["method"] in ("GET", "HEAD") and e["path"].startswith(f"/v2/{repo.split(':')[0]}/manifests/")]
    # the layer and the config, once each; one manifest request (or a HEAD then a GET)
    assert len(shared_blobs) == 2 and len({e["path"] for e in shared_blobs}) == 2, seen
    assert 1 <= len(manifest) <= 2, seen
    # the final stage's image: its own manifest; its layer and config were
    # stored already, and are not fetched again
    assert any(e["path"].startswith("/v2/jobs-other/manifests/") for e in log), seen
    assert not any(e["path"].startswith("/v2/jobs-other/blobs/") for e in log), [x for x in seen if "jobs-other" in x[1]]
