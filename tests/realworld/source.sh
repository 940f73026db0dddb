#!/usr/bin/env bash
# The source of Debian's docker-registry 2.8.2+ds1-1 (CNCF distribution) as
# Debian builds it: the orig tarball with debian/ and its patches applied
# (they drop the Azure, New Relic and letsencrypt code whose Go libraries
# Debian lacks), made a git repository tagged v2.8.2, as the project's
# Dockerfile's `version` stage runs `git describe`.
#   source.sh DEST    (DEST must not exist)
# The two files come from the Debian mirror once, are checked against the
# sha256 sums of bookworm's Sources index, and are kept in
# $IMGBUILD_TEST_CACHE/realworld.
set -euo pipefail
dest=$1
cache=${IMGBUILD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild-tests}/realworld
mirror=${IMGBUILD_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"
files=(
  "65137484d75412af7a13104a31eed8ed69e97c616bb60cb9f4ed2a9a7cc1f8fb docker-registry_2.8.2+ds1.orig.tar.xz"
  "101a4794e4f33f88683c2d8c33accd14653eb928ddb39d33d9de39d944516af0 docker-registry_2.8.2+ds1-1.debian.tar.xz"
)
for line in "${files[@]}"; do
  sum=${line%% *} f=${line#* }
  if [ "$(sha256sum "$cache/$f" 2>/dev/null | cut -d' ' -f1)" != "$sum" ]; then
    curl -fsS -m 300 -o "$cache/$f.tmp" "$mirror/pool/main/d/docker-registry/$f"
    [ "$(sha256sum "$cache/$f.tmp" | cut -d' ' -f1)" = "$sum" ] || { echo "source: $f: sha256 mismatch" >&2; exit 1; }
    mv "$cache/$f.tmp" "$cache/$f"
  fi
done
mkdir -p "$dest"
tar -xJf "$cache/docker-registry_2.8.2+ds1.orig.tar.xz" -C "$dest" --strip-components=1
tar -xJf "$cache/docker-registry_2.8.2+ds1-1.debian.tar.xz" -C "$dest"
while read -r p; do
  case $p in ''|'#'*) continue ;; esac
  patch -d "$dest" -p1 -s < "$dest/debian/patches/$p"
done < "$dest/debian/patches/series"
git -C "$dest" init -q
git -C "$dest" -c user.name=imgbuild-tests -c user.email=tests@imgbuild.invalid add -A
git -C "$dest" -c user.name=imgbuild-tests -c user.email=tests@imgbuild.invalid \
  commit -q -m "docker-registry 2.8.2+ds1-1 as Debian builds it"
git -C "$dest" tag v2.8.2
