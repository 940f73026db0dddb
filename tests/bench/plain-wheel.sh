#!/usr/bin/env bash
# The lower bound of tests/bench/cache.sh's wheel build: the same steps as
# wheel.recipe run by a plain script in a user-namespace chroot, without
# any layer, snapshot, image or cache.  Run inside
#   unshare --map-root-user --map-auto --mount --pid --fork --
#   plain-wheel.sh BASE_TAR CONTEXT WORKDIR
# BASE_TAR: the base image's rootfs as one tar (what the image's layer
# holds, uncompressed); CONTEXT: ext/ and debs/ as for the recipe.
set -euo pipefail
base=$1 ctx=$2 w=$3
mkdir -p "$w/build" "$w/client"
# stage build: the base, the toolchain from the local .debs, the wheel
tar -xf "$base" -C "$w/build" --exclude './dev/*'
mkdir -p "$w/build/debs" "$w/build/proc" "$w/build/dev"
mount --rbind /dev "$w/build/dev"
mount -t proc proc "$w/build/proc"
mount --bind "$ctx/debs" "$w/build/debs"
chroot "$w/build" sh -c 'apt-get install -y -qq --no-install-recommends /debs/*.deb >/dev/null'
cp -a "$ctx/ext/." "$w/build/src/" 2>/dev/null || { mkdir -p "$w/build/src" && cp -a "$ctx/ext/." "$w/build/src/"; }
chroot "$w/build" sh -c 'cd /src && python3 setup.py -q bdist_wheel -d /wheels >/dev/null 2>&1 && ls /wheels'
# (the mounts go with the mount namespace when the script exits)
# stage client: the base and the wheel under /opt
tar -xf "$base" -C "$w/client" --exclude './dev/*'
cp -a "$w/build/wheels/." "$w/client/opt/"
