#!/usr/bin/env bash
# The GNU tar lower bounds of tests/bench/layers.sh.
#
#   tar-layers.sh unpack DIR INFLATE BLOB...
#       per layer, in order, `INFLATE -dc BLOB | tar -x -C DIR` (INFLATE:
#       gzip, pigz or zstd), or `tar -x -f BLOB -C DIR` for INFLATE "none".
#       Not a real unpack: whiteout files are written as plain files and
#       nothing is verified; device nodes are left out (`--exclude`, an
#       unprivileged tar cannot make them).
#   tar-layers.sh write DIR OUT COMPRESS HASHDIR
#       one layer: `tar -C DIR -cf - .`, compressed by COMPRESS (gzip: gzip
#       -6, pigz: pigz -6, zstd: zstd -3 -T0, none: nothing) into OUT; as a
#       layer writer must, it also hashes the tar stream (the diff_id, into
#       HASHDIR/diff_id) and the compressed stream (the digest, into
#       HASHDIR/digest) with sha256sum, in two more processes reading
#       copies of the streams from tee through FIFOs, all at once.
set -euo pipefail
op=$1
case $op in
unpack)
  dir=$2 inflate=$3
  shift 3
  mkdir "$dir"
  for blob in "$@"; do
    if [ "$inflate" = none ]; then
      tar -x --exclude='./dev/*' -C "$dir" -f "$blob"
    else
      "$inflate" -dc "$blob" | tar -x --exclude='./dev/*' -C "$dir"
    fi
  done
  ;;
write)
  dir=$2 out=$3 compress=$4 hd=$5
  case $compress in
  gzip) c=(gzip -6) ;;
  pigz) c=(pigz -6) ;;
  zstd) c=(zstd -q -3 -T0) ;;
  none) c=() ;;
  *) echo "tar-layers.sh: unknown compressor $compress" >&2; exit 2 ;;
  esac
  mkfifo "$hd/tar.fifo"
  sha256sum < "$hd/tar.fifo" > "$hd/diff_id" &
  h1=$!
  if [ ${#c[@]} -eq 0 ]; then
    tar -C "$dir" -cf - . | tee "$hd/tar.fifo" > "$out"
    wait $h1
    cp "$hd/diff_id" "$hd/digest"
  else
    mkfifo "$hd/out.fifo"
    sha256sum < "$hd/out.fifo" > "$hd/digest" &
    h2=$!
    tar -C "$dir" -cf - . | tee "$hd/tar.fifo" | "${c[@]}" | tee "$hd/out.fifo" > "$out"
    wait $h1 $h2
  fi
  rm -f "$hd/tar.fifo" "$hd/out.fifo"
  ;;
*)
  echo "usage: tar-layers.sh unpack DIR INFLATE BLOB... | write DIR OUT COMPRESS HASHDIR" >&2
  exit 2
  ;;
esac
