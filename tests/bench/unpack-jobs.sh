#!/usr/bin/env bash
# Layers unpacked at once against one by one (issue 24): `imgbuild unpack`
# of the bench images with IMGBUILD_UNPACK_JOBS=1 (one layer at a time)
# and with the default (one per CPU, at most 8), alternating, in one run:
#   blobs   from a store that holds the image's blobs (ib_rootfs_prepare);
#   stream  on an empty store: pulled from the local registry and unpacked
#           while it downloads (ib_rootfs_pull).
# Every run on tmpfs, after `sync`; wall seconds, user+sys CPU seconds and
# peak RSS (GNU time); the median per image, source and setting, and the
# ratio. The trees of both settings are compared once per image (path,
# type, mode, owner, size, mtime, link target): a difference fails the run.
#
#   sudo bash tests/bench/unpack-jobs.sh              # big and huge, 3 rounds
#   sudo bash tests/bench/unpack-jobs.sh --rounds 1 --images "small"
#
# The images come from tests/bench/make-images.sh (cached under
# IMGBUILD_BENCH_CACHE, default /var/tmp/imgbuild-bench; the huge image is
# made once, ~6 min). BENCH_FS (default /dev/shm) holds the work tree; the
# huge image needs ~9 GB there. Results: $BENCH_OUT (default
# $IMGBUILD_BENCH_CACHE/results/unpack-jobs-DATE): raw.tsv, report.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${IMGBUILD_BENCH_CACHE:-/var/tmp/imgbuild-bench}
ib=${IMGBUILD:-$top/bin/imgbuild}
rounds=${BENCH_RUNS:-3}
images=${BENCH_IMAGES:-"big huge"}
fs=${BENCH_FS:-/dev/shm}
out=${BENCH_OUT:-$cache/results/unpack-jobs-$(date -u +%Y%m%dT%H%M%SZ)}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "bench: $*" >&2; }
die() { say "$*"; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) rounds=${2:?}; shift 2 ;;
  --images) images=${2:?}; shift 2 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
  *) die "unknown option $1" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "run as root"
[ -x "$ib" ] || die "no imgbuild binary at $ib: run 'make'"
[ -x /usr/bin/time ] || die "missing /usr/bin/time: sudo bash tests/bench/install-deps.sh"
mkdir -p "$out"
w=$fs/imgbuild-bench-jobs
regdir=$cache/registry
bash "$top/tests/lib/registry.sh" stop "$regdir" 2>/dev/null || true
port=$(bash "$top/tests/lib/registry.sh" start "$regdir")
reg=127.0.0.1:$port
trap 'bash "$top/tests/lib/registry.sh" stop "$regdir"; rm -rf "$w"' EXIT
declare -A ref_of=()
while read -r name ref; do
  ref_of[$name]=$ref
done < <(IMGBUILD_BENCH_CACHE=$cache bash "$here/make-images.sh" "$reg" "$ib" $images)
say "nproc $(nproc); results in $out"

raw=$out/raw.tsv
: > "$raw"
tree_sum() { (cd "$1" && find . -printf '%p %y %m %U:%G %s %T@ %l\n' | LC_ALL=C sort | sha256sum | cut -c1-16); }
# one IMAGE SOURCE SETTING ROUND: a run, recorded
one() {
  local img=$1 src=$2 set=$3 round=$4 jobs
  jobs=$([ "$set" = one ] && echo 1 || echo "")
  rm -rf "$w/rootfs"
  [ "$src" = stream ] && rm -rf "$w/store"
  sync
  /usr/bin/time -o "$w/time" -f "%e %U %S %M" env IMGBUILD_UNPACK_JOBS="$jobs" \
    "$ib" --store "$w/store" -q unpack "${ref_of[$img]}" "$w/rootfs" 2> "$w/err" \
    || die "$img $src $set failed: $(tail -3 "$w/err")"
  read -r wall user sys rss < "$w/time"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$img" "$src" "$set" "$round" "$wall" \
    "$(echo "$user + $sys" | bc)" "$rss" >> "$raw"
  say "$(printf '%-5s %-6s %-4s round %s: %6.2f s, %6.2f CPU s, %s KiB' "$img" "$src" "$set" "$round" "$wall" "$(echo "$user + $sys" | bc)" "$rss")"
  if [ "$round" = 1 ]; then
    tree_sum "$w/rootfs" > "$w/sum-$img-$src-$set"
  fi
}
for img in $images; do
  [ -n "${ref_of[$img]:-}" ] || die "no image $img"
  rm -rf "$w" && mkdir -p "$w"
  "$ib" --store "$w/store" -q pull "${ref_of[$img]}" >/dev/null
  for r in $(seq 1 "$rounds"); do
    # alternate which setting goes first
    if [ $((r % 2)) = 1 ]; then order="one all"; else order="all one"; fi
    for s in $order; do one "$img" blobs "$s" "$r"; done
  done
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="one all"; else order="all one"; fi
    for s in $order; do one "$img" stream "$s" "$r"; done
  done
  for src in blobs stream; do
    cmp -s "$w/sum-$img-$src-one" "$w/sum-$img-$src-all" \
      || die "$img ($src): the trees of one-by-one and at-once differ"
  done
  rm -rf "$w"
done

/usr/bin/python3 - "$raw" "$(nproc)" <<'EOF' | tee "$out/report.md"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
print(f"Layers at once vs one by one, {sys.argv[2]} CPUs, medians of {max(int(r[3]) for r in rows)} rounds")
print()
print("| image | source | one by one s | at once s | ratio | CPU s (one / at once) | peak RSS MiB (one / at once) |")
print("|---|---|---|---|---|---|---|")
seen = []
for r in rows:
    if (r[0], r[1]) not in seen:
        seen.append((r[0], r[1]))
for img, src in seen:
    m = {}
    for s in ("one", "all"):
        sel = [r for r in rows if r[0] == img and r[1] == src and r[2] == s]
        m[s] = [statistics.median(float(r[i]) for r in sel) for i in (4, 5, 6)]
    print(f"| {img} | {src} | {m['one'][0]:.2f} | {m['all'][0]:.2f} | {m['all'][0] / m['one'][0]:.2f} "
          f"| {m['one'][1]:.1f} / {m['all'][1]:.1f} | {m['one'][2] / 1024:.0f} / {m['all'][2] / 1024:.0f} |")
EOF
