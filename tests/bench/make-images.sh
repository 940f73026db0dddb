#!/usr/bin/env bash
# Make the benchmark's images and push them to a registry as Docker
# schema2 with gzip layers (what Docker Hub serves):
#   make-images.sh REGISTRY_HOST:PORT IMGBUILD_BINARY [small] [big] [huge]
# prints a line "NAME REFERENCE" for each image asked for (default small
# and big).
#
#   small  REGISTRY/debian:bookworm      Debian bookworm minbase, one gzip layer
#          (tests/lib/base-image.sh: mmdebstrap + umoci)
#   big    REGISTRY/bench/build:latest   four layers: the minbase, then
#          tests/bench/build-image.recipe's three RUN apt-get install steps,
#          built by imgbuild itself
#   huge   REGISTRY/bench/huge:latest    six layers, CUDA-sized: the big
#          image, then tests/bench/huge-image.recipe's CUDA runtime
#          libraries and TeX Live (about 6 GiB, 165,000 files unpacked)
#
# All are made once and kept as OCI layouts under $IMGBUILD_BENCH_CACHE
# (default /var/tmp/imgbuild-bench); later calls only push them. Making
# them needs Debian's mirror ($IMGBUILD_MIRROR): about 10 minutes for the
# big image, 30 more for the huge one.
set -euo pipefail
registry=$1 imgbuild=$2
shift 2
want=" ${*:-small big} "
here=$(cd "$(dirname "$0")" && pwd)
cache=${IMGBUILD_BENCH_CACHE:-/var/tmp/imgbuild-bench}
mkdir -p "$cache"

# The small image, also the big one's base: base-image.sh keeps its
# tarball and layout in our cache.
IMGBUILD_TEST_CACHE=$cache bash "$here/../lib/base-image.sh" "$registry" >/dev/null
[[ $want == *" small "* ]] && echo "small $registry/debian:bookworm"
[[ $want == *" big "* || $want == *" huge "* ]] || exit 0

# build_layout NAME RECIPE: the OCI layout $cache/NAME-oci made by
# imgbuild from tests/bench/RECIPE. Rebuilt when the recipe's content
# changes, not its mtime (a fresh checkout or worktree is newer than any
# cache). A layout from before this stamp is kept and stamped with the
# recipe at hand.
build_layout() {
  local name=$1 recipe=$here/$2 layout=$cache/$1-oci took=$3; shift 3
  local stamp=$cache/$name-oci.recipe.sha256 store=$cache/$name-store
  local recipe_sum
  recipe_sum=$(sha256sum "$recipe" | cut -d' ' -f1)
  if [ -f "$layout/index.json" ] && [ ! -f "$stamp" ]; then
    echo "$recipe_sum" > "$stamp"
  fi
  if [ -f "$layout/index.json" ] && [ "$(cat "$stamp")" = "$recipe_sum" ]; then
    return 0
  fi
  echo "make-images: building the $name image with imgbuild (once, $took)" >&2
  rm -rf "$layout"
  if ! "$imgbuild" --store "$store" -q build "$recipe" \
      --build-arg "REGISTRY=$registry" --output "type=oci,dest=$layout/,name=$name" "$@" \
      >"$cache/$name.log" 2>&1; then
    echo "make-images: building the $name image failed; last lines of $cache/$name.log:" >&2
    tail -n 20 "$cache/$name.log" >&2
    exit 1
  fi
  rm -rf "$store"   # kept after a failure: its build cache makes the next try shorter
  echo "$recipe_sum" > "$stamp"
}

# The huge image is built on the big one, so the big one is pushed first.
build_layout build build-image.recipe "~10 min"
skopeo copy --quiet --format v2s2 --dest-tls-verify=false \
  "oci:$cache/build-oci:build" "docker://$registry/bench/build:latest" >&2
[[ $want == *" big "* ]] && echo "big $registry/bench/build:latest"
[[ $want == *" huge "* ]] || exit 0

build_layout huge huge-image.recipe "~30 min, 1.2 GB from the mirror" \
  --build-arg "MIRROR=${IMGBUILD_MIRROR:-http://deb.debian.org/debian}"
skopeo copy --quiet --format v2s2 --dest-tls-verify=false \
  "oci:$cache/huge-oci:huge" "docker://$registry/bench/huge:latest" >&2
echo "huge $registry/bench/huge:latest"
