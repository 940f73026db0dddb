#!/usr/bin/env bash
# recipes/demo.recipe's 4-cell matrix (PKG=markupsafe,python-crcmod x
# OPT=2,s) built through a one-host Slurm cluster beside the same matrix
# built locally with --matrix -j 2, in one run (issue 23's ratio).
#
#   make                                   # bin/imgbuild
#   sudo bash tests/bench/slurm.sh         # about 10 minutes on 2 cores
#   sudo bash tests/bench/slurm.sh --rounds 1
#
# Per round, both cold, in the order local/slurm, then slurm/local:
#   local  `imgbuild build recipes/demo.recipe --matrix ... -j 2
#          --reproducible` in a fresh store and work directory: the four
#          cells one after the other in one store (the shared apt steps
#          built by the first cell, hits for the others).
#   slurm  the same command with --slurm -j 2 --cache-to a fresh registry
#          tag, each node (n1, n2 of tests/lib/slurm.sh, on this host) with
#          a fresh store: the seed job builds the shared steps and exports
#          them, then two cells at a time import them and build the rest.
#          Timed from the command's start to its summary: sbatch, the
#          scheduler, the follower's polling (IMGBUILD_SLURM_POLL=0.3),
#          the imports and unpacks on the nodes are all inside.
# Both use the Debian mirror for apt (the same packages, the same proxy),
# the local registry for the base image and the image outputs.
# Runs as root.  Prints a Markdown table (median, min, max seconds; slurm /
# local) and, from the last slurm run, the step log lines that show the
# second node taking the shared steps from the registry cache; keeps both
# with the raw times in $BENCH_OUT (default
# /var/tmp/imgbuild-bench/results/slurm-DATE).
# Options: --rounds N (BENCH_RUNS, default 3); IMGBUILD (default
# bin/imgbuild), BENCH_DIR (default /var/tmp/imgbuild-bench/slurm, removed
# at the end unless BENCH_KEEP=1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-/var/tmp/imgbuild-tests}
runs=${BENCH_RUNS:-3}
ib=${IMGBUILD:-$top/bin/imgbuild}
dir=${BENCH_DIR:-/var/tmp/imgbuild-bench/slurm}
out=${BENCH_OUT:-/var/tmp/imgbuild-bench/results/slurm-$(date -u +%Y%m%dT%H%M%SZ)}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "bench: $*" >&2; }
die() { say "$*"; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) runs=${2:?}; shift 2 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
  *) die "unknown option $1" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "run as root"
[ -x "$ib" ] || die "no imgbuild binary at $ib: run 'make'"
bash "$top/tests/install-deps.sh" >&2
rm -rf "$dir" && mkdir -p "$dir" "$out"
chmod 755 "$dir"
cleanup() {
  bash "$top/tests/lib/slurm.sh" stop "$dir/cluster" 2>/dev/null || true
  bash "$top/tests/lib/registry.sh" stop "$dir/reg" 2>/dev/null || true
  # the rounds' stores (12 GB after 3 rounds); the results stay in $out
  [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT
port=$(bash "$top/tests/lib/registry.sh" start "$dir/reg")
reg=127.0.0.1:$port
bash "$top/tests/lib/base-image.sh" "$reg" >/dev/null
mkdir -p "$dir/cluster"
bash "$top/tests/lib/slurm.sh" start "$dir/cluster"
export SLURM_CONF=$dir/cluster/slurm.conf IMGBUILD_SLURM_POLL=0.3
matrix=(--matrix PKG=markupsafe,python-crcmod --matrix OPT=2,s)
common=("$top/recipes/demo.recipe" "${matrix[@]}" --build-arg "REGISTRY=$reg" --reproducible -j 2)

now() { date +%s.%N; }
run_local() { # round
  local w=$dir/local-$1
  rm -rf "$w" && mkdir -p "$w"
  local t0; t0=$(now)
  (cd "$w" && "$ib" --store "$w/store" build "${common[@]}" >"$w/stdout.txt" 2>"$w/stderr.txt") \
    || die "local round $1 failed: $(tail -5 "$w/stderr.txt")"
  echo "local $1 $(echo "$(now) - $t0" | bc)" >> "$out/times"
}
run_slurm() { # round
  local w=$dir/slurm-$1
  rm -rf "$w" && mkdir -p "$w"
  local t0; t0=$(now)
  (cd "$w" && "$ib" --store "$w/unused" build "${common[@]}" --slurm --slurm-dir "$w/jobs" \
     --slurm-store "$w/stores/%n" --cache-to "type=registry,ref=$reg/bench-cache:r$1" \
     >"$w/stdout.txt" 2>"$w/stderr.txt") || die "slurm round $1 failed: $(tail -5 "$w/stderr.txt")"
  echo "slurm $1 $(echo "$(now) - $t0" | bc)" >> "$out/times"
}
: > "$out/times"
for r in $(seq 1 "$runs"); do
  if [ $((r % 2)) -eq 1 ]; then run_local "$r"; run_slurm "$r"; else run_slurm "$r"; run_local "$r"; fi
  say "round $r: $(grep " $r " "$out/times" | tr '\n' ' ')"
done
last=$dir/slurm-$runs
{
  /usr/bin/python3 - "$out/times" <<'EOF'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    k, _, s = line.split()
    t.setdefault(k, []).append(float(s))
print("| 4-cell demo matrix, cold | median s | min | max |")
print("| --- | ---: | ---: | ---: |")
for k, label in (("local", "local `--matrix -j 2`"), ("slurm", "`--slurm -j 2`, 2 nodes on this host")):
    v = t[k]
    print(f"| {label} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} |")
print(f"\nslurm / local (medians): {statistics.median(t['slurm']) / statistics.median(t['local']):.2f}x "
      f"({len(t['local'])} rounds)")
EOF
  echo
  echo "From the last slurm run (its job directory's logs):"
  jd=$(ls -d "$last"/jobs/job-*)
  grep -h -E "seed job|running on|: ok in" "$last/stderr.txt" | sed 's/^/    /'
  for f in "$jd"/logs/seed.out "$jd"/logs/cell-*.out; do
    echo "  $(basename "$f"):"
    grep -E "^==> matrix|cache imported|cache exported|^\[build 3/[0-9]+\] RUN echo|^\[client 3/[0-9]+\] RUN apt|stopped before" "$f" \
      | sed -E 's/(RUN (echo|apt-get update)).{0,0}.*( CACHED)$/\1 ...\3/; s/(RUN (echo|apt-get update)) .*[^D]$/\1 .../' | sed 's/^/    /'
  done
} | tee "$out/report.md"
