#!/usr/bin/env bash
# tests/gpu/run-on-gpu.sh — the GPU checks of docs/gpu.md, on a machine with
# an NVIDIA GPU and driver (not part of `make test`: CI has no GPU).
#
# Needs, in GPU_CARRY (default ./gpu-carry): minbase.tar.xz (a Debian
# bookworm minbase rootfs), cuda_probe (tests/gpu/cuda_probe.c built with
# `cc -O2 -o cuda_probe tests/gpu/cuda_probe.c -ldl`), and any shared
# library bin/imgbuild needs that the machine lacks (LD_LIBRARY_PATH).
# Runs as root; the rootless part runs as a user it creates (single-id mode).
set -uo pipefail
cd "$(dirname "$0")/../.."
ib=${IMGBUILD:-$PWD/bin/imgbuild}
carry=${GPU_CARRY:-$PWD/gpu-carry}
export LD_LIBRARY_PATH=$carry${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d /tmp/ib-gpu.XXXXXX)
chmod 755 "$work"
fail=0
step() { echo; echo "== $*"; }
check() { if "$@"; then echo "-> ok"; else echo "-> FAILED (exit $?)"; fail=1; fi; }

mkdir -p "$work/ctx/rootfs"
tar -xJf "$carry/minbase.tar.xz" -C "$work/ctx/rootfs"
rm -rf "$work/ctx/rootfs/dev/"*   # device nodes: the sandbox makes its own /dev
install -m 755 "$carry/cuda_probe" "$work/ctx/rootfs/usr/local/bin/cuda_probe"
cp "$ib" "$work/imgbuild"

step "host"
date -u; uname -r; nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ls /etc/cdi /var/run/cdi 2>&1 | head -2

step "imgbuild run --device nvidia.com/gpu=all, as root (NVIDIA discovery, no CDI spec)"
check "$ib" --store "$work/store" run --device nvidia.com/gpu=all --rootfs "$work/ctx/rootfs" -- \
  sh -c 'nvidia-smi -L && cuda_probe && ls /dev | grep nvidia | tr "\n" " " && echo &&
         ldconfig -p | grep -E "libcuda.so|libnvidia-ml.so|ptxjit" && cat /etc/debian_version'

uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
step "imgbuild run --device nvidia.com/gpu=$uuid"
check "$ib" --store "$work/store" run --device "nvidia.com/gpu=$uuid" --rootfs "$work/ctx/rootfs" -- cuda_probe

step "without --device the sandbox has no GPU (expected to fail)"
if "$ib" --store "$work/store" run --rootfs "$work/ctx/rootfs" -- cuda_probe; then
  echo "-> FAILED: the GPU was reachable without --device"; fail=1
else echo "-> ok (no GPU without --device)"; fi

step "the rootfs is unchanged by the GPU runs (no driver files, same ld.so.cache)"
check sh -c "! ls '$work/ctx/rootfs/usr/lib/x86_64-linux-gnu/' | grep -qE 'libcuda|libnvidia' && ! [ -e '$work/ctx/rootfs/usr/bin/nvidia-smi' ]"

step "a build: RUN --device=nvidia.com/gpu=all in a recipe (FROM scratch + the rootfs)"
cat > "$work/ctx/gpu.recipe" <<R
FROM scratch
COPY rootfs/ /
RUN --device=nvidia.com/gpu=all sh -c 'cuda_probe > /probe.txt && nvidia-smi -L > /gpus.txt'
OUTPUT type=local,dest=$work/out
R
check "$ib" --store "$work/store" build "$work/ctx/gpu.recipe"
cat "$work/out/probe.txt" "$work/out/gpus.txt" 2>&1
check sh -c "! ls '$work/out/usr/lib/x86_64-linux-gnu/' | grep -qE 'libcuda|libnvidia' && ! [ -e '$work/out/usr/bin/nvidia-smi' ]"

step "rootless: an unprivileged user, single-id mode"
id gpuuser >/dev/null 2>&1 || useradd -m gpuuser
mkdir -p "$work/user" && cp -a "$work/ctx/rootfs" "$work/user/rootfs" && chown -R gpuuser "$work/user"
check runuser -u gpuuser -- env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IMGBUILD_USERNS=single \
  "$work/imgbuild" --store "$work/user/store" run --device nvidia.com/gpu=all \
  --rootfs "$work/user/rootfs" -- sh -c 'id -u; nvidia-smi -L && cuda_probe'

if [ -x /opt/torch/.venv/bin/python3 ]; then
  step "the host's PyTorch in a sandbox: /usr, /etc and /opt/torch bound read-only, --device nvidia.com/gpu=all"
  h=$work/hostroot
  mkdir -p "$h/usr" "$h/etc" "$h/opt/torch" "$h/proc" "$h/dev" "$h/sys" "$h/tmp"
  for l in bin lib lib64 sbin; do ln -s "usr/$l" "$h/$l"; done
  check "$ib" --store "$work/store" run --device nvidia.com/gpu=all -v /usr:/usr:ro -v /etc:/etc:ro \
    -v /opt/torch:/opt/torch:ro --rootfs "$h" -- /opt/torch/.venv/bin/python3 -c \
    'import torch; print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(), torch.cuda.get_device_name(0)); x = torch.ones(1024, 1024, device="cuda"); print("sum on GPU:", float((x @ x).sum()))'
fi

rm -rf "$work"
echo
[ $fail -eq 0 ] && echo "GPU checks: all passed" || echo "GPU checks: some FAILED"
exit $fail
