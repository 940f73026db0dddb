#!/usr/bin/env bash
# Make the Debian bookworm minbase base image and push it to a registry.
#   base-image.sh REGISTRY_HOST:PORT
# The rootfs tarball is made once with mmdebstrap from the Debian mirror and
# kept in $IMGBUILD_TEST_CACHE (default ~/.cache/imgbuild-tests); the OCI
# image is assembled by umoci and pushed by skopeo, so imgbuild's pull is
# tested against an image it did not make.
set -euo pipefail
registry=$1
cache=${IMGBUILD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild-tests}
mirror=${IMGBUILD_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"
tarball=$cache/bookworm-minbase.tar
if [ ! -s "$tarball" ]; then
  echo "base-image: mmdebstrap bookworm minbase from $mirror (once)" >&2
  mmdebstrap --quiet --variant=minbase --format=tar bookworm "$tarball.tmp" "$mirror" >&2
  mv "$tarball.tmp" "$tarball"
fi
layout=$cache/bookworm-oci
if [ ! -f "$layout/index.json" ] || [ "$tarball" -nt "$layout/index.json" ]; then
  rm -rf "$layout.tmp"
  umoci init --layout "$layout.tmp"
  umoci new --image "$layout.tmp:bookworm"
  umoci raw add-layer --image "$layout.tmp:bookworm" \
    --history.created_by "mmdebstrap --variant=minbase bookworm" "$tarball"
  umoci config --image "$layout.tmp:bookworm" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.cmd bash --os linux --architecture amd64
  umoci gc --layout "$layout.tmp"
  rm -rf "$layout"
  mv "$layout.tmp" "$layout"
fi
# Two tags: Docker schema2 (what Docker Hub serves) and OCI.
skopeo copy --quiet --format v2s2 --dest-tls-verify=false "oci:$layout:bookworm" "docker://$registry/debian:bookworm" >&2
skopeo copy --quiet --format oci --dest-tls-verify=false "oci:$layout:bookworm" "docker://$registry/debian:bookworm-oci" >&2
echo "$registry/debian:bookworm"
