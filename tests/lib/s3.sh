#!/usr/bin/env bash
# A local S3-compatible server for the e2e tests (tests/lib/s3-server.js:
# @20minutes/s3rver, which validates AWS SigV4 signatures), on 127.0.0.1.
#   s3.sh install            -> npm-installs the server into the test cache
#   s3.sh start DIR [BUCKET...] -> prints the port; pid in DIR/pid, data in DIR/data
#   s3.sh stop DIR
# The package is installed once with npm into $IMGBUILD_TEST_CACHE/s3rver
# (default /var/tmp/imgbuild-tests), or into DIR when that cache is not
# writable and lacks it.  Buckets default to "artifacts".  Credentials:
# access key id S3RVER, secret access key S3RVER.  The server stops by itself
# after IMGBUILD_S3_LIFETIME seconds (default 3 h) if nobody stops it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=4.0.4
cache=${IMGBUILD_TEST_CACHE:-/var/tmp/imgbuild-tests}/s3rver
lifetime=${IMGBUILD_S3_LIFETIME:-10800}

# The whole dependency tree is pinned, integrity hashes included, by
# tests/lib/s3rver/package-lock.json (npm ci installs exactly that).
install_into() { # DIR
  local d=$1
  [ -f "$d/node_modules/@20minutes/s3rver/package.json" ] \
    && grep -q "\"version\": \"$version\"" "$d/node_modules/@20minutes/s3rver/package.json" \
    && cmp -s "$here/s3rver/package-lock.json" "$d/package-lock.json" && return 0
  mkdir -p "$d"
  cp "$here/s3rver/package.json" "$here/s3rver/package-lock.json" "$d/"
  (cd "$d" && npm ci --silent --no-audit --no-fund) >&2
}

modules() { # DIR (fallback)
  if install_into "$cache" 2>/dev/null; then
    echo "$cache/node_modules"
  else
    install_into "$1/npm" && echo "$1/npm/node_modules"
  fi
}

cmd=${1:-}
case "$cmd" in
install)
  install_into "$cache"
  ;;
start)
  dir=$2; shift 2
  buckets=("$@")
  [ ${#buckets[@]} -gt 0 ] || buckets=(artifacts)
  command -v node >/dev/null || { echo "s3.sh: node is missing (tests/install-deps.sh installs it)" >&2; exit 1; }
  mkdir -p "$dir/data"
  mods=$(modules "$dir")
  rm -f "$dir/port"
  NODE_PATH=$mods setsid timeout "$lifetime" node "$here/s3-server.js" "$dir/data" "$dir/port" \
    "${buckets[@]}" >"$dir/log" 2>&1 </dev/null &
  echo $! > "$dir/pid"
  for _ in $(seq 1 200); do
    if [ -s "$dir/port" ]; then
      cat "$dir/port"; echo
      exit 0
    fi
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
    sleep 0.05
  done
  echo "s3.sh: the S3 server did not start; log: $(tail -n 5 "$dir/log")" >&2
  exit 1
  ;;
stop)
  dir=$2
  if [ -f "$dir/pid" ]; then
    kill "$(cat "$dir/pid")" 2>/dev/null || true
    rm -f "$dir/pid"
  fi
  ;;
*)
  echo "usage: s3.sh install | start DIR [BUCKET...] | stop DIR" >&2
  exit 2
  ;;
esac
