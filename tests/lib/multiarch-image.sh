#!/usr/bin/env bash
# Make the Debian bookworm minbase image for linux/arm64 and a two-platform
# index, and push them to a registry (after base-image.sh pushed amd64):
#   multiarch-image.sh REGISTRY_HOST:PORT
# prints two references: REGISTRY/debian:bookworm-arm64 (the arm64 image
# alone) and REGISTRY/debian:multi (an OCI index: linux/amd64, the image
# base-image.sh makes, and linux/arm64/v8).  The arm64 rootfs is made once
# with mmdebstrap (its maintainer scripts run through qemu-user: needs
# qemu-user-static, binfmt-support and arch-test) and kept in
# $IMGBUILD_TEST_CACHE; the image is assembled by umoci and pushed by skopeo.
set -euo pipefail
registry=$1
here=$(cd "$(dirname "$0")" && pwd)
cache=${IMGBUILD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild-tests}
mirror=${IMGBUILD_MIRROR:-http://deb.debian.org/debian}
bash "$here/base-image.sh" "$registry" > /dev/null
mkdir -p "$cache"
tarball=$cache/bookworm-minbase-arm64.tar
if [ ! -s "$tarball" ]; then
  echo "multiarch-image: mmdebstrap bookworm minbase arm64 from $mirror (once)" >&2
  mmdebstrap --quiet --variant=minbase --architectures=arm64 --format=tar bookworm \
    "$tarball.tmp" "$mirror" >&2
  mv "$tarball.tmp" "$tarball"
fi
layout=$cache/multi-oci
if [ ! -f "$layout/index.json" ] || [ "$tarball" -nt "$layout/index.json" ] \
   || [ "$cache/bookworm-oci/index.json" -nt "$layout/index.json" ]; then
  rm -rf "$layout.tmp"
  skopeo copy --quiet "oci:$cache/bookworm-oci:bookworm" "oci:$layout.tmp:amd64"
  umoci new --image "$layout.tmp:arm64"
  umoci raw add-layer --image "$layout.tmp:arm64" \
    --history.created_by "mmdebstrap --variant=minbase --architectures=arm64 bookworm" "$tarball"
  umoci config --image "$layout.tmp:arm64" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.cmd bash --os linux --architecture arm64
  # umoci leaves the variant out; the index entry says v8, as Docker Hub's do
  /usr/bin/python3 - "$layout.tmp" <<'EOF'
import hashlib, json, sys
layout = sys.argv[1]
idx_path = f"{layout}/index.json"
idx = json.load(open(idx_path))
by_tag = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in idx["manifests"]}
entries = []
for tag, plat in (("amd64", {"architecture": "amd64", "os": "linux"}),
                  ("arm64", {"architecture": "arm64", "os": "linux", "variant": "v8"})):
    m = by_tag[tag]
    entries.append({"mediaType": m["mediaType"], "digest": m["digest"], "size": m["size"],
                    "platform": plat})
data = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                   "manifests": entries}, sort_keys=True, separators=(",", ":")).encode()
digest = hashlib.sha256(data).hexdigest()
open(f"{layout}/blobs/sha256/{digest}", "wb").write(data)
idx["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json",
                         "digest": "sha256:" + digest, "size": len(data),
                         "annotations": {"org.opencontainers.image.ref.name": "multi"}})
json.dump(idx, open(idx_path, "w"))
EOF
  umoci gc --layout "$layout.tmp"
  rm -rf "$layout"
  mv "$layout.tmp" "$layout"
fi
skopeo copy --quiet --dest-tls-verify=false "oci:$layout:arm64" \
  "docker://$registry/debian:bookworm-arm64" >&2
skopeo copy --quiet --all --dest-tls-verify=false "oci:$layout:multi" \
  "docker://$registry/debian:multi" >&2
echo "$registry/debian:bookworm-arm64"
echo "$registry/debian:multi"
