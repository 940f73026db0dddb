#!/usr/bin/env bash
# Make the benchmark's two images and push them to a registry as Docker
# schema2 with gzip layers (what Docker Hub serves):
#   make-images.sh REGISTRY_HOST:PORT IMGBUILD_BINARY [small] [big]
# prints a line "NAME REFERENCE" for each image asked for (default both).
#
#   small  REGISTRY/debian:bookworm      Debian bookworm minbase, one gzip layer
#          (tests/lib/base-image.sh: mmdebstrap + umoci)
#   big    REGISTRY/bench/build:latest   four layers: the minbase, then
#          tests/bench/build-image.recipe's three RUN apt-get install steps,
#          built by imgbuild itself
#
# Both are made once and kept as OCI layouts under $IMGBUILD_BENCH_CACHE
# (default /var/tmp/imgbuild-bench); later calls only push them. Making
# them needs Debian's mirror ($IMGBUILD_MIRROR) and about 10 minutes.
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
[[ $want == *" big "* ]] || exit 0

big=$cache/build-oci
# Rebuilt when the recipe's content changes, not its mtime (a fresh
# checkout or worktree is newer than any cache). A layout from before
# this stamp is kept and stamped with the recipe at hand.
stamp=$cache/build-oci.recipe.sha256
recipe_sum=$(sha256sum "$here/build-image.recipe" | cut -d' ' -f1)
if [ -f "$big/index.json" ] && [ ! -f "$stamp" ]; then
  echo "$recipe_sum" > "$stamp"
fi
if [ ! -f "$big/index.json" ] || [ "$(cat "$stamp")" != "$recipe_sum" ]; then
  echo "make-images: building the big image with imgbuild (once, ~10 min)" >&2
  store=$cache/build-store
  rm -rf "$big"
  if ! "$imgbuild" --store "$store" -q build "$here/build-image.recipe" \
      --build-arg "REGISTRY=$registry" --output "type=oci,dest=$big/,name=build" \
      >"$cache/build.log" 2>&1; then
    echo "make-images: building the big image failed; last lines of $cache/build.log:" >&2
    tail -n 20 "$cache/build.log" >&2
    exit 1
  fi
  rm -rf "$store"   # kept after a failure: its build cache makes the next try shorter
  echo "$recipe_sum" > "$stamp"
fi
skopeo copy --quiet --format v2s2 --dest-tls-verify=false \
  "oci:$big:build" "docker://$registry/bench/build:latest" >&2
echo "big $registry/bench/build:latest"
