#!/usr/bin/env bash
# Hostile scale: a build context of a million files, and an image whose
# one layer holds a million entries (issue 38, "Prove it").  Each must end
# bounded (time and peak memory printed here) or refused with a message,
# with nothing outside the store and the output touched.  Not a race
# against peers: the figures go to docs/security.md ("Hostile recipes").
#
#   make && bash tests/bench/hostile-scale.sh [N]     # N entries (1000000)
#
# A. context: N empty files in N/1000 directories, a recipe `FROM scratch`
#    / `COPY . /c/`, built with -o type=oci (the whole build: context scan,
#    cache key over every file, copy, one layer of N entries, the layout).
# B. layer: one gzip layer of N empty files (python's tarfile) in an OCI
#    layout, `imgbuild pull oci:DIR`, then `imgbuild unpack` of it.
# Both as the calling user; /usr/bin/time -v gives wall time and peak RSS.
# Work files go to $HOSTILE_DIR (default a new directory in /var/tmp), removed
# at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-1000000}
bin=${IMGBUILD:-$PWD/bin/imgbuild}
w=$(mktemp -d "${HOSTILE_DIR:-/var/tmp}/imgbuild-hostile.XXXXXX")
trap 'rm -rf "$w"' EXIT
measure() { # LABEL CMD...: runs it, prints wall seconds, peak RSS and the status
  local label=$1; shift
  local rc=0
  /usr/bin/time -f '%e %M' -o "$w/out-time" "$@" > "$w/out-log" 2> "$w/out-err" || rc=$?
  read -r secs kb < <(tail -1 "$w/out-time")
  printf '%-34s %8s s %8d MiB  exit %d\n' "$label" "$secs" $((kb / 1024)) "$rc"
  [ "$rc" -eq 0 ] || tail -3 "$w/out-err"
}
# What must not change: the input tree (two levels: names, sizes, modes,
# times) and the work directory beside the store and outputs (out-*).
untouched() { # INPUT-DIR
  (cd "$1" && find . -maxdepth 2 -printf '%p %s %m %T@\n' | sort)
  (cd "$w" && find . -mindepth 1 -maxdepth 1 -not -name 'out-*' -printf '%p\n' | sort)
}

echo "== $n entries ($(nproc) cores, $(uname -r))"
python3 - "$w/ctx" "$n" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
per = 1000
for d in range((n + per - 1) // per):
    dd = os.path.join(root, "d%04d" % d)
    os.makedirs(dd)
    for f in range(min(per, n - d * per)):
        open(os.path.join(dd, "f%04d" % f), "wb").close()
open(os.path.join(root, "Dockerfile"), "w").write("FROM scratch\nCOPY . /c/\n")
PY
before=$(untouched "$w/ctx")
measure "A. build, context of $n files" \
  "$bin" --store "$w/out-store" build -o "type=oci,dest=$w/out-a.tar" "$w/ctx"
[ "$before" = "$(untouched "$w/ctx")" ] && echo "   the context and beside the store: unchanged" || echo "   the context or beside the store: CHANGED"
[ -s "$w/out-a.tar" ] && echo "   layout: $(du -h "$w/out-a.tar" | cut -f1)"
rm -rf "$w/ctx" "$w"/out-*

python3 - "$w/layout" "$n" <<'PY'
import gzip, hashlib, io, json, os, sys, tarfile
out, n = sys.argv[1], int(sys.argv[2])
blobs = os.path.join(out, "blobs", "sha256")
os.makedirs(blobs)
raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
    for d in range((n + 999) // 1000):
        di = tarfile.TarInfo("d%04d" % d); di.type = tarfile.DIRTYPE; di.mode = 0o755
        t.addfile(di)
        for f in range(min(1000, n - d * 1000)):
            fi = tarfile.TarInfo("d%04d/f%04d" % (d, f)); fi.mode = 0o644
            t.addfile(fi)
tar = raw.getvalue()
gz = gzip.compress(tar, 6, mtime=0)
def put(b):
    h = hashlib.sha256(b).hexdigest()
    open(os.path.join(blobs, h), "wb").write(b)
    return "sha256:" + h
config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                     "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]}}).encode()
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(config), "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(gz), "size": len(gz)}]}).encode()
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
    "digest": put(manifest), "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": "wide"}}]},
    open(os.path.join(out, "index.json"), "w"))
open(os.path.join(out, "oci-layout"), "w").write('{"imageLayoutVersion":"1.0.0"}')
print("   layer: %d bytes of tar, %d gzip" % (len(tar), len(gz)))
PY
before=$(untouched "$w/layout")
measure "B. pull, one layer of $n entries" "$bin" --store "$w/out-store" pull "oci:$w/layout:wide"
measure "B. unpack it" "$bin" --store "$w/out-store" unpack wide "$w/out-tree"
[ -d "$w/out-tree" ] && echo "   tree: $(find "$w/out-tree" | wc -l) paths"
[ "$before" = "$(untouched "$w/layout")" ] && echo "   the layout and beside the store: unchanged" || echo "   the layout or beside the store: CHANGED"
