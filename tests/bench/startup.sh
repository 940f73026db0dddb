#!/usr/bin/env bash
# Start-up and the no-op rebuild (issue 24, goal 1): what a command costs
# before it does anything, against a static C program that does nothing,
# and a rebuild of tests/bench/ten.recipe with nothing changed; the
# imgbuild of this checkout beside an older one, in one run.
#
#   make                                        # bin/imgbuild
#   sudo bash tests/bench/startup.sh --old 3b71130
#   sudo bash tests/bench/startup.sh --old-bin /path/to/imgbuild --rounds 5
#
# Timed (medians; each command run --runs times per round, the commands
# interleaved within a round):
#   nop        a static C program that returns 0 (cc -O2 -static): the floor
#   version    `imgbuild version`, old and new
#   noop       `imgbuild -q build ten.recipe` with every step cached, old
#              and new, as root (root mode) and as the unprivileged user
#              $BENCH_USER (map mode); each binary has its own stores,
#              warmed by one cold build (untimed); on tmpfs (/dev/shm)
# Timing: tests/bench/spawntime.c (posix_spawn, wait, CLOCK_MONOTONIC;
# output to /dev/null).  Beside the times: `perf stat` (task-clock, page
# faults) and the dynamic loader's statistics (LD_DEBUG=statistics:
# relocations, time in the loader) for `version`, and the shared objects
# each command loads (LD_DEBUG=files).
# Options: --rounds N (BENCH_RUNS, default 3), --runs N per round
# (default 100 for nop/version, a tenth of it for noop); --old REF builds
# that commit of this repository (git archive, make) as the old binary;
# --old-bin FILE uses a binary.  Needs root (the bench user, the
# registry); results in $BENCH_OUT (default
# /var/tmp/imgbuild-bench/results/startup-DATE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${IMGBUILD_BENCH_CACHE:-/var/tmp/imgbuild-bench}
new_src=${IMGBUILD:-$top/bin/imgbuild}
rounds=${BENCH_RUNS:-3}
runs=100
old_ref=
old_bin=
out=${BENCH_OUT:-$cache/results/startup-$(date -u +%Y%m%dT%H%M%SZ)}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "bench: $*" >&2; }
die() { say "$*"; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) rounds=${2:?}; shift 2 ;;
  --runs) runs=${2:?}; shift 2 ;;
  --old) old_ref=${2:?}; shift 2 ;;
  --old-bin) old_bin=${2:?}; shift 2 ;;
  *) die "unknown option $1" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "run as root (the bench user, the registry)"
[ -x "$new_src" ] || die "no imgbuild binary at $new_src: run 'make'"
command -v perf >/dev/null || die "missing perf (linux-perf): sudo bash tests/bench/install-deps.sh"

user=${BENCH_USER:-imgbuild-bench}
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
grep -q "^$user:" /etc/subuid || usermod --add-subuids 400000-465535 "$user"
grep -q "^$user:" /etc/subgid || usermod --add-subgids 400000-465535 "$user"
uhome=$(getent passwd "$user" | cut -d: -f6)

base=/dev/shm/imgbuild-bench-startup
regdir=$cache/registry-startup
mkdir -p "$cache/bin" "$out"
chmod 755 "$cache" "$cache/bin"
cleanup() {
  bash "$top/tests/lib/registry.sh" stop "$regdir" 2>/dev/null || true
  rm -rf "$base"
}
trap cleanup EXIT
rm -rf "$base"
mkdir -p "$base/xdg" && chown "$user" "$base" "$base/xdg" && chmod 700 "$base/xdg"

# the binaries: copies where the bench user can run them
install -m 755 "$new_src" "$cache/bin/imgbuild-startup-new"
new=$cache/bin/imgbuild-startup-new
old=
if [ -n "$old_ref" ]; then
  src=$cache/startup-old-$old_ref
  if [ ! -x "$src/bin/imgbuild" ]; then
    rm -rf "$src" && mkdir -p "$src"
    git -C "$top" archive "$old_ref" | tar -x -C "$src"
    say "building $old_ref in $src"
    make -C "$src" -j"$(nproc)" >"$src.make.log" 2>&1 || die "make of $old_ref failed: $src.make.log"
  fi
  old_bin=$src/bin/imgbuild
fi
if [ -n "$old_bin" ]; then
  install -m 755 "$old_bin" "$cache/bin/imgbuild-startup-old"
  old=$cache/bin/imgbuild-startup-old
fi
cat >"$base/nop.c" <<'EOF'
int main (void) { return 0; }
EOF
cc -O2 -static -o "$cache/bin/nop-static" "$base/nop.c"
nop=$cache/bin/nop-static
cc -O2 -o "$cache/bin/spawntime" "$here/spawntime.c"
spawntime=$cache/bin/spawntime

bash "$top/tests/lib/registry.sh" stop "$regdir" 2>/dev/null || true
port=$(bash "$top/tests/lib/registry.sh" start "$regdir")
ref=$(IMGBUILD_TEST_CACHE=$cache bash "$top/tests/lib/base-image.sh" "127.0.0.1:$port")
ctx=$base/ctx
mkdir -p "$ctx/ext"
cp "$here/ten.recipe" "$ctx/"
cp -r "$here/cache-ext/." "$ctx/ext/"
chmod -R a+rX "$base"

as_user() {
  (cd / && runuser -u "$user" -- env -i HOME="$uhome" USER="$user" LOGNAME="$user" \
     PATH="$PATH" XDG_RUNTIME_DIR="$base/xdg" LANG=C.UTF-8 "$@")
}
# one store per binary and identity, warmed by a cold build
declare -A cmds
order=(nop)
cmds[nop]="$nop"
for which in old new; do
  bin=${!which}
  [ -n "$bin" ] || continue
  order+=("version-$which")
  cmds[version-$which]="$bin version"
  for who in root user; do
    s=$base/store-$which-$who
    build=("$bin" -q --store "$s" build "$ctx/ten.recipe" --build-arg "BASE=$ref" -t bench-ten:1)
    if [ "$who" = user ]; then
      mkdir -p "$s" && chown "$user" "$s"
      as_user "${build[@]}" >/dev/null || die "the cold build ($which, $who) failed"
      cmds[noop-$which-$who]="runuser -u $user -- env -i HOME=$uhome PATH=$PATH XDG_RUNTIME_DIR=$base/xdg LANG=C.UTF-8 ${build[*]}"
    else
      "${build[@]}" >/dev/null || die "the cold build ($which, $who) failed"
      cmds[noop-$which-$who]="${build[*]}"
    fi
    order+=("noop-$which-$who")
  done
done
# runuser itself costs a process: its own figure, to subtract
cmds[runuser]="runuser -u $user -- env -i PATH=$PATH $nop"
order+=(runuser)

say "base $ref; old ${old:-none}; results in $out"
{
  for k in "${order[@]}"; do printf '%s\t%s\n' "$k" "${cmds[$k]}"; done
} >"$out/commands.tsv"

/usr/bin/python3 - "$out" "$rounds" "$runs" "$spawntime" <<'EOF'
import statistics, subprocess, sys
out, rounds, runs, spawntime = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cmds = [l.rstrip("\n").split("\t", 1) for l in open(f"{out}/commands.tsv")]
times = {k: [] for k, _ in cmds}
for r in range(rounds):
    for k, c in (cmds if r % 2 == 0 else cmds[::-1]):
        n = runs if not k.startswith("noop") else max(runs // 10, 5)
        p = subprocess.run([spawntime, str(n), *c.split()], capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"bench: {c}: {p.stderr}")
        times[k] += [float(x) / 1e6 for x in p.stdout.split()]
with open(f"{out}/times.tsv", "w") as f:
    for k, ts in times.items():
        f.write(k + "\t" + " ".join(f"{t:.6f}" for t in ts) + "\n")
med = {k: statistics.median(ts) * 1000 for k, ts in times.items()}
print("| command | median ms | min ms | n | / nop |")
print("| --- | ---: | ---: | ---: | ---: |")
for k, ts in times.items():
    print(f"| {k} | {med[k]:.2f} | {min(ts) * 1000:.2f} | {len(ts)} | {med[k] / med['nop']:.2f}x |")
print()
if "version-old" in med:
    print(f"version: old {med['version-old']:.2f} ms, new {med['version-new']:.2f} ms; "
          f"new / nop {med['version-new'] / med['nop']:.2f}x")
for who in ("root", "user"):
    if f"noop-old-{who}" in med:
        print(f"no-op ({who}): old {med[f'noop-old-{who}']:.2f} ms, new "
              f"{med[f'noop-new-{who}']:.2f} ms ({med[f'noop-old-{who}'] / med[f'noop-new-{who}']:.2f}x faster)")
print(f"(user rows include runuser: {med['runuser']:.2f} ms for runuser + the nop)")
EOF

echo
echo "perf stat -r $runs (task-clock, page faults):"
for k in nop version-old version-new; do
  [ -n "${cmds[$k]:-}" ] || continue
  perf stat -r "$runs" -e task-clock,page-faults -x, ${cmds[$k]} 2>"$out/perf-$k.csv" >/dev/null
  awk -F, -v k="$k" '{ printf "  %-12s %-12s %s\n", k, $3, $1 }' "$out/perf-$k.csv"
done
echo "the dynamic loader (LD_DEBUG=statistics; objects: LD_DEBUG=files):"
for k in version-old version-new noop-old-root noop-new-root; do
  [ -n "${cmds[$k]:-}" ] || continue
  LD_DEBUG=statistics ${cmds[$k]} 2>"$out/ld-$k.txt" >/dev/null
  LD_DEBUG=files ${cmds[$k]} 2>"$out/files-$k.txt" >/dev/null
  rel=$( (grep -m1 'final number of relocations:' "$out/ld-$k.txt" || true) | awk '{print $NF}')
  cyc=$( (grep -m1 'total startup time in dynamic loader' "$out/ld-$k.txt" || true) | \
    awk '{print $(NF-1)}')
  atstart=$(grep -c 'needed by' "$out/files-$k.txt" || true)
  later=$( (grep 'dynamically loaded by' "$out/files-$k.txt" || true) | \
    sed -E 's/.*file=([^ ]+).*/\1/' | sort -u | tr '\n' ' ')
  printf '  %-14s relocations %-6s loader %s cycles; %s objects at start; loaded later: %s\n' \
    "$k" "$rel" "$cyc" "$atstart" "${later:-none}"
done
