#!/usr/bin/env bash
# The physical floor of a pull+unpack on this machine, in three parts that
# a perfect tool would overlap (issue 24: the floor is the largest):
#   floor.sh prepare HOST:PORT REPO TAG INDIR   (untimed, once per image)
#   floor.sh download HOST:PORT REPO TAG         every layer blob from the
#            registry to /dev/null, all at once (curl --parallel), as a
#            pull's downloads run
#   floor.sh inflate INDIR                       every layer inflated to
#            /dev/null with ISA-L's igzip, as many layers at a time as there
#            are cores (one gzip stream cannot be inflated on two)
#   floor.sh untar INDIR DIR                     the layers' uncompressed
#            tars (made by prepare) extracted in order into DIR with
#            `tar -x`, one after the other (whiteouts not applied)
# prepare writes INDIR/layers (one layer per line: digest, gzip path,
# uncompressed tar path) with the layers' gzip blobs and their tars under
# INDIR, INDIR/unpacked_bytes (the tars' sizes summed) and INDIR/entries
# (their entries counted). Nothing is
# verified: this is a lower bound, not an unpack.
set -euo pipefail
cmd=$1; shift
accept="application/vnd.docker.distribution.manifest.v2+json,application/vnd.oci.image.manifest.v1+json"
layer_digests() { # HOST:PORT REPO TAG
  curl -sSf -H "Accept: $accept" "http://$1/v2/$2/manifests/$3" \
    | /usr/bin/python3 -c 'import json,sys; print("\n".join(l["digest"] for l in json.load(sys.stdin)["layers"]))'
}
case $cmd in
prepare)
  reg=$1 repo=$2 tag=$3 in=$4
  if [ -s "$in/layers" ]; then exit 0; fi
  mkdir -p "$in"
  : > "$in/layers.tmp"
  total=0 entries=0
  for d in $(layer_digests "$reg" "$repo" "$tag"); do
    h=${d#sha256:}
    curl -sSf -o "$in/$h.gz" "http://$reg/v2/$repo/blobs/$d"
    igzip -dc "$in/$h.gz" > "$in/$h.tar"
    total=$(( total + $(stat -c %s "$in/$h.tar") ))
    entries=$(( entries + $(tar -tf "$in/$h.tar" | wc -l) ))
    printf '%s\t%s\t%s\n' "$d" "$in/$h.gz" "$in/$h.tar" >> "$in/layers.tmp"
  done
  echo "$total" > "$in/unpacked_bytes"
  echo "$entries" > "$in/entries"
  mv "$in/layers.tmp" "$in/layers"
  ;;
download)
  reg=$1 repo=$2 tag=$3
  args=()
  for d in $(layer_digests "$reg" "$repo" "$tag"); do
    args+=(-o /dev/null "http://$reg/v2/$repo/blobs/$d")
  done
  curl -sSf --parallel --parallel-max 6 "${args[@]}"
  ;;
inflate)
  in=$1
  cut -f2 "$in/layers" | xargs -P "$(nproc)" -I{} sh -c 'igzip -dc "$1" > /dev/null' sh {}
  ;;
untar)
  in=$1 dir=$2
  mkdir "$dir"
  cut -f3 "$in/layers" | while read -r t; do
    tar -x --no-same-owner --exclude='./dev/*' -f "$t" -C "$dir"
  done
  ;;
*)
  echo "floor.sh: unknown part '$cmd'" >&2; exit 2 ;;
esac
