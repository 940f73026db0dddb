#!/usr/bin/env bash
# tests/gpu/make-carry.sh [DIR] — fills DIR (default ./gpu-carry, the
# GPU_CARRY of tests/gpu/*.sh) with what bin/imgbuild needs on a GPU
# machine that may lack it: the shared libraries bin/imgbuild links
# (DT_NEEDED, glibc's own left out), and patchelf (`imgbuild wheel repair`
# runs it).  Run it where bin/imgbuild was built; the scripts put the
# libraries the machine lacks, and only those, on imgbuild's
# LD_LIBRARY_PATH.  Other files in DIR (run-on-gpu.sh's minbase.tar.xz and
# cuda_probe) are left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-gpu-carry}
ib=${IMGBUILD:-bin/imgbuild}
mkdir -p "$dir"
for n in $(readelf -d "$ib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
  case $n in libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | ld-linux*) continue ;; esac
  f=$(ldd "$ib" | awk -v n="$n" '$1 == n { print $3 }')
  [ -n "$f" ] || { echo "make-carry.sh: $n: not found" >&2; exit 1; }
  cp -L "$f" "$dir/$n"
done
pe=$(command -v patchelf) || { echo "make-carry.sh: no patchelf here (apt-get install patchelf)" >&2; exit 1; }
cp -L "$pe" "$dir/patchelf"
ls -l "$dir"
du -sh "$dir"
