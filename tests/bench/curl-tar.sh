#!/usr/bin/env bash
# The benchmark's lower bound: fetch an image's manifest from a plain-HTTP
# registry, then for each layer in order `curl URL | INFLATE -d | tar -x`
# into DIR, one layer after the other.
#   curl-tar.sh HOST:PORT REPO TAG DIR [gzip|pigz] [RSSFILE]
# Not a real unpack: whiteout files are written as plain files and nothing
# is verified; device nodes are left out (`--exclude`, an unprivileged tar
# cannot make them). With RSSFILE, writes there the largest sum, over the
# layers, of the three processes' peak RSS in KiB (the pipeline's processes
# run at the same time, so their peaks add up).
set -euo pipefail
registry=$1 repo=$2 tag=$3 dir=$4 inflate=${5:-gzip} rssfile=${6:-}
base=http://$registry/v2/$repo
accept="application/vnd.docker.distribution.manifest.v2+json,application/vnd.oci.image.manifest.v1+json"
layers=$(curl -sSf -H "Accept: $accept" "$base/manifests/$tag" \
  | /usr/bin/python3 -c 'import json,sys; print("\n".join(l["digest"] for l in json.load(sys.stdin)["layers"]))')
mkdir "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
peak=0
for digest in $layers; do
  if [ -n "$rssfile" ]; then
    /usr/bin/time -f %M -o "$tmp/curl" curl -sSf "$base/blobs/$digest" \
      | /usr/bin/time -f %M -o "$tmp/inflate" "$inflate" -d \
      | /usr/bin/time -f %M -o "$tmp/tar" tar -x --exclude='./dev/*' -C "$dir"
    sum=$(( $(tail -n1 "$tmp/curl") + $(tail -n1 "$tmp/inflate") + $(tail -n1 "$tmp/tar") ))
    [ "$sum" -gt "$peak" ] && peak=$sum
  else
    curl -sSf "$base/blobs/$digest" | "$inflate" -d | tar -x --exclude='./dev/*' -C "$dir"
  fi
done
[ -z "$rssfile" ] || echo "$peak" > "$rssfile"
