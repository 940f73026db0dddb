#!/usr/bin/env bash
# tests/lib/three-modes.sh TITLE SUITE CACHE_PREFIX: run the pytest suite
# SUITE (a directory under tests/) as the calling user and, when that is
# root, again as the unprivileged user of tests/run-e2e.sh in both
# user-namespace modes (map: /etc/subuid ranges; single:
# IMGBUILD_USERNS=single, one id plus root emulation).  The suite keeps
# per-user caches in $IMGBUILD_TEST_CACHE/CACHE_PREFIX.uidUID (the
# identity mode is part of the cache key), made here for the unprivileged
# user.  Each pass prints its time; the exit status is 1 when one failed.
# Used by tests/torch/run.sh (make e2e-torch) and tests/frameworks/run.sh
# (make e2e-frameworks).
set -euo pipefail
title=$1 suite=$2 prefix=$3
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
unpriv=${IMGBUILD_TEST_USER:-imgbuild-test}
status=0
pass() { # NAME CMD...
  local name=$1 t0=$SECONDS
  shift
  echo "== $title: $name"
  "$@" || status=1
  echo "== $name: $((SECONDS - t0)) s"
}
if [ "$(id -u)" -eq 0 ]; then
  export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-/var/tmp/imgbuild-tests}
  mkdir -p "$IMGBUILD_TEST_CACHE" && chmod 755 "$IMGBUILD_TEST_CACHE"
  d=$(mktemp -d "/tmp/imgbuild-$prefix.XXXXXX")
  trap 'rm -rf "$d"' EXIT
  mkdir -p "$d/bin" && cp bin/imgbuild "$d/bin/" && cp -r tests recipes "$d/"
  chmod -R a+rX "$d"
  pass "as root" env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    $py -m pytest -p no:cacheprovider -v --durations=3 --basetemp "$d/t1" "$d/tests/$suite"
  rm -rf "$d/t1"
  chmod -R a+rX "$IMGBUILD_TEST_CACHE"
  id "$unpriv" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$unpriv"
  c="$IMGBUILD_TEST_CACHE/$prefix.uid$(id -u "$unpriv")"
  mkdir -p "$c" && chown "$unpriv" "$c"
  grep -q "^$unpriv:" /etc/subuid 2>/dev/null || usermod --add-subuids 300000-365535 "$unpriv"
  grep -q "^$unpriv:" /etc/subgid 2>/dev/null || usermod --add-subgids 300000-365535 "$unpriv"
  chown -R "$unpriv" "$d"
  pass "as $unpriv (map mode)" runuser -u "$unpriv" -- env IMGBUILD_TEST_CACHE="$IMGBUILD_TEST_CACHE" \
    PATH=/usr/sbin:/usr/bin:/sbin:/bin $py -m pytest -p no:cacheprovider -v --durations=3 --basetemp "$d/t2" "$d/tests/$suite"
  rm -rf "$d/t2"
  pass "as $unpriv (single-id mode)" runuser -u "$unpriv" -- env IMGBUILD_USERNS=single \
    IMGBUILD_TEST_CACHE="$IMGBUILD_TEST_CACHE" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    $py -m pytest -p no:cacheprovider -v --durations=3 --basetemp "$d/t3" "$d/tests/$suite"
else
  export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild-tests}
  pass "as $(id -un)" env PATH=/usr/sbin:/usr/bin:/sbin:/bin $py -m pytest -p no:cacheprovider -v --durations=3 "tests/$suite"
fi
exit $status
