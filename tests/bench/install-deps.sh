#!/usr/bin/env bash
# Installs what tests/bench/pull-unpack.sh needs besides imgbuild's own
# build and test dependencies (tests/install-deps.sh, which CI uses): the
# peers measured and the tools the harness drives. Needs root (apt-get).
# Not part of CI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/../install-deps.sh"
pkgs=(
  # the peers
  skopeo umoci podman buildah fuse-overlayfs uidmap
  charliecloud-builders charliecloud-runtime python3-lark
  # the harness: registry, images, lower bound, timing
  docker-registry mmdebstrap curl gzip pigz isal tar time openssl python3 linux-perf
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "bench install-deps: missing packages: ${missing[*]}; run it as root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
