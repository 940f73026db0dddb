#!/usr/bin/env bash
# torchvision 0.14.1 compiled from its real source: imgbuild beside the
# same build run directly on this host, in one run (issue 22's ratios).
#
#   make                                       # bin/imgbuild
#   sudo bash tests/bench/torchvision.sh       # about 15 minutes on 2 cores
#   sudo bash tests/bench/torchvision.sh --rounds 1
#
# The same source (Debian's pytorch-vision_0.14.1.orig.tar.gz, torchvision's
# upstream tarball, from the Debian mirror, sha256 checked), the same flags
# (FORCE_CUDA=0, MAX_JOBS=BENCH_JOBS, ccache through /usr/lib/ccache with
# CC=gcc CXX=g++), the same toolchain and torch (Debian bookworm's
# python3-torch 1.13.1, g++ 12, ninja: installed on this host with apt-get
# when missing, and in the image as tests/frameworks/sources.py's stand-in
# base makes it).  Per round:
#   cold   imgbuild: `imgbuild build` of tests/bench/torchvision.recipe in a
#          fresh store holding only the stand-in base (made untimed, its apt
#          step from the test cache), empty ccache mount: COPY of the
#          source, the compile and `setup.py bdist_wheel` with the ccache
#          mount, the layer, OUTPUT's copy and audit of the wheel.
#          host: a fresh copy of the source, the same commands, an empty
#          CCACHE_DIR, the wheel copied out.
#   edit   a one-line change to torchvision/csrc/ops/cpu/nms_kernel.cpp,
#          then the wheel again: imgbuild reruns the COPY and the build
#          step from the cache (a fresh tree: every object from the ccache
#          mount but the edited one's); the host likewise builds a fresh
#          copy with its warm CCACHE_DIR.
# Runs as root (imgbuild in its root mode).  Prints a Markdown table
# (median, min, max seconds; imgbuild / host) and keeps it with the raw
# times in $BENCH_OUT (default /var/tmp/imgbuild-bench/results/torchvision-DATE).
# Options: --rounds N (BENCH_RUNS, default 3); BENCH_JOBS (default 2),
# IMGBUILD (default bin/imgbuild), IMGBUILD_TEST_CACHE (default
# /var/tmp/imgbuild-tests: the source tarball, the minbase image, the
# stand-in's apt step), BENCH_DIR (default /var/tmp/imgbuild-bench/torchvision).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-/var/tmp/imgbuild-tests}
runs=${BENCH_RUNS:-3}
jobs=${BENCH_JOBS:-2}
ib=${IMGBUILD:-$top/bin/imgbuild}
dir=${BENCH_DIR:-/var/tmp/imgbuild-bench/torchvision}
out=${BENCH_OUT:-/var/tmp/imgbuild-bench/results/torchvision-$(date -u +%Y%m%dT%H%M%SZ)}
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
[ "$(id -u)" -eq 0 ] || die "run as root (apt-get for the host's toolchain; imgbuild's root mode)"
[ -x "$ib" ] || die "no imgbuild binary at $ib: run 'make'"
pkgs="python3-torch libtorch-dev python3-dev g++ make ninja-build ccache libjpeg-dev libpng-dev python3-numpy python3-pil python3-setuptools python3-wheel"
missing=$(for p in $pkgs; do dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"; done)
if [ -n "$missing" ]; then
  say "apt-get install $missing (the host's toolchain)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2
fi
tarball=$(cd "$top/tests/frameworks" && /usr/bin/python3 -c 'import sources; print(sources.vision_tarball())')
[ -f "$IMGBUILD_TEST_CACHE/bookworm-oci/index.json" ] \
  || die "no minbase image in $IMGBUILD_TEST_CACHE/bookworm-oci: run make e2e-frameworks (or tests/lib/base-image.sh) once"

rm -rf "$dir" && mkdir -p "$dir/ctx" "$out"
tar -xzf "$tarball" -C "$dir/ctx" --no-same-owner && mv "$dir/ctx/vision-0.14.1" "$dir/ctx/vision"
cp "$here/torchvision.recipe" "$dir/ctx/torchvision.recipe"
(cd "$top/tests/frameworks" && /usr/bin/python3 -c 'import sources; print(sources.STANDIN_RECIPE, end="")') \
  > "$dir/ctx/standin.recipe"
edit_file=torchvision/csrc/ops/cpu/nms_kernel.cpp
flags=(FORCE_CUDA=0 "MAX_JOBS=$jobs" CC=gcc CXX=g++)

fresh_store() { # the stand-in base only (untimed)
  rm -rf "$dir/store" "$dir/ctx/out"
  "$ib" --store "$dir/store" pull "oci:$IMGBUILD_TEST_CACHE/bookworm-oci:bookworm" >/dev/null
  "$ib" --store "$dir/store" tag docker.io/library/bookworm:latest localhost/bookworm:minbase
  "$ib" --store "$dir/store" build -q "$dir/ctx/standin.recipe" --build-arg BASE=localhost/bookworm:minbase \
    --cache-from "type=local,src=$IMGBUILD_TEST_CACHE/frameworks.uid0/standin-auto" >/dev/null
}
ib_build() {
  (cd "$dir/ctx" && "$ib" --store "$dir/store" build --progress plain torchvision.recipe \
     --build-arg "MAX_JOBS=$jobs" >"$dir/ib.log" 2>&1) || { tail -20 "$dir/ib.log" >&2; die "imgbuild build failed"; }
  ls "$dir/ctx/out/"torchvision-*.whl >/dev/null
}
host_build() {
  rm -rf "$dir/host/vision" "$dir/host/out" && mkdir -p "$dir/host/out"
  cp -a "$dir/ctx/vision" "$dir/host/vision"
  (cd "$dir/host/vision" && env PATH="/usr/lib/ccache:$PATH" CCACHE_DIR="$dir/host/ccache" "${flags[@]}" \
     python3 setup.py bdist_wheel >"$dir/host.log" 2>&1 && cp dist/torchvision-*.whl "$dir/host/out/") \
    || { tail -20 "$dir/host.log" >&2; die "host build failed"; }
}
timed() { # PHASE TOOL CMD...: appends "PHASE TOOL SECONDS" to raw.txt
  local phase=$1 tool=$2 t0 t1
  shift 2
  sync
  t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N)
  echo "$phase $tool $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" | tee -a "$out/raw.txt" >&2
}
edit() { echo "// bench edit $1" >> "$dir/ctx/vision/$edit_file"; }

say "host: $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); imgbuild $("$ib" version | head -1)"
for r in $(seq 1 "$runs"); do
  say "round $r/$runs"
  cp "$tarball" /dev/null
  (cd "$dir/ctx" && rm -rf vision && tar -xzf "$tarball" --no-same-owner && mv vision-0.14.1 vision)
  fresh_store; rm -rf "$dir/host/ccache"
  if [ $((r % 2)) -eq 1 ]; then order="imgbuild host"; else order="host imgbuild"; fi
  for t in $order; do
    if [ "$t" = imgbuild ]; then timed cold imgbuild ib_build; else timed cold host host_build; fi
  done
  edit "$r"
  for t in $order; do
    if [ "$t" = imgbuild ]; then timed edit imgbuild ib_build; else timed edit host host_build; fi
  done
  # the edited unit is compiled again, the others come from the ccache mount
  grep -q "nms_kernel.cpp" "$dir/ib.log" || die "the edit rebuild did not compile the edited file"
done
/usr/bin/python3 - "$out/raw.txt" <<'PY' | tee "$out/table.md"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
t = {}
for phase, tool, sec in rows:
    t.setdefault((phase, tool), []).append(float(sec))
print("| phase | imgbuild s (min-max) | host s (min-max) | imgbuild / host |")
print("| --- | --- | --- | --- |")
for phase in ("cold", "edit"):
    a, b = t[(phase, "imgbuild")], t[(phase, "host")]
    f = lambda v: "%.1f (%.1f-%.1f)" % (statistics.median(v), min(v), max(v))
    print("| %s | %s | %s | %.2fx |" % (phase, f(a), f(b), statistics.median(a) / statistics.median(b)))
PY
say "raw times and table in $out"
