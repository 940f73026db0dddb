#!/usr/bin/env bash
# dockerfile-ast 0.7.1, an independent Dockerfile parser from npm, and its
# validator dockerfile-utils 0.16.3, for tests/e2e/test_recipe_corpus_crosscheck.py
# (tests/lib/dockerfile-ast/dump.js).
#   dockerfile-ast.sh install      -> npm-installs them into the test cache
#   dockerfile-ast.sh modules DIR  -> prints its node_modules directory
# The packages are installed once with `npm ci` (the tree pinned, integrity
# hashes included, by tests/lib/dockerfile-ast/package-lock.json) into
# $IMGBUILD_TEST_CACHE/dockerfile-ast (default /var/tmp/imgbuild-tests), or
# into DIR when that cache is not writable and lacks it.  Only installing
# needs the network; tests/run-e2e.sh installs it before the suite runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${IMGBUILD_TEST_CACHE:-/var/tmp/imgbuild-tests}/dockerfile-ast

install_into() { # DIR
  local d=$1
  # npm ci installs exactly what the lock file names: the same lock file and
  # both packages present mean the same tree
  [ -f "$d/node_modules/dockerfile-ast/package.json" ] \
    && [ -f "$d/node_modules/dockerfile-utils/package.json" ] \
    && cmp -s "$here/dockerfile-ast/package-lock.json" "$d/package-lock.json" && return 0
  mkdir -p "$d"
  cp "$here/dockerfile-ast/package.json" "$here/dockerfile-ast/package-lock.json" "$d/"
  (cd "$d" && npm ci --silent --no-audit --no-fund) >&2
}

case "${1:-}" in
install)
  install_into "$cache"
  ;;
modules)
  command -v node >/dev/null || { echo "dockerfile-ast.sh: node is missing (tests/install-deps.sh installs it)" >&2; exit 1; }
  if install_into "$cache" 2>/dev/null; then
    echo "$cache/node_modules"
  else
    install_into "$2/npm" && echo "$2/npm/node_modules"
  fi
  ;;
*)
  echo "usage: dockerfile-ast.sh install | modules DIR" >&2
  exit 2
  ;;
esac
