#!/usr/bin/env bash
# make e2e-torch: the real torch build (tests/torch/test_torch_ext.py):
# recipes/torch-cuda-ext.recipe on a Debian bookworm stand-in base with
# python3-torch 1.13.1 from the mirror, the extension compiled against it,
# its wheel repaired, imported and checked in a client image.  Run as the
# calling user and, when that is root, again as the unprivileged user of
# tests/run-e2e.sh in both user-namespace modes (map: /etc/subuid ranges;
# single: IMGBUILD_USERNS=single, one id plus root emulation).  Needs the
# Debian mirror once per mode (the stand-in's apt step is then cached in
# $IMGBUILD_TEST_CACHE/torch-ext.uidUID/standin-MODE, about 1 GB each).
# Each pass prints its time.
# Not part of `make test`: a warm pass takes minutes (the C++ compile
# against libtorch's headers alone is about a minute on 2 cores); the
# times measured are in docs/recipes.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
unpriv=${IMGBUILD_TEST_USER:-imgbuild-test}
status=0
pass() { # NAME CMD...
  local name=$1 t0=$SECONDS
  shift
  echo "== torch extension build: $name"
  "$@" || status=1
  echo "== $name: $((SECONDS - t0)) s"
}
if [ "$(id -u)" -eq 0 ]; then
  export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-/var/tmp/imgbuild-tests}
  mkdir -p "$IMGBUILD_TEST_CACHE" && chmod 755 "$IMGBUILD_TEST_CACHE"
  d=$(mktemp -d /tmp/imgbuild-torch.XXXXXX)
  trap 'rm -rf "$d"' EXIT
  mkdir -p "$d/bin" && cp bin/imgbuild "$d/bin/" && cp -r tests recipes "$d/"
  chmod -R a+rX "$d"
  pass "as root" env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    $py -m pytest -p no:cacheprovider -v --durations=3 --basetemp "$d/t1" "$d/tests/torch"
  rm -rf "$d/t1"
  chmod -R a+rX "$IMGBUILD_TEST_CACHE"
  id "$unpriv" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$unpriv"
  # the identity mode is part of the cache key: the unprivileged user keeps
  # its own stand-in caches, one per mode, in a directory of its own
  # (test_torch_ext.standin_cache_name)
  c="$IMGBUILD_TEST_CACHE/torch-ext.uid$(id -u "$unpriv")"
  mkdir -p "$c" && chown "$unpriv" "$c"
  grep -q "^$unpriv:" /etc/subuid 2>/dev/null || usermod --add-subuids 300000-365535 "$unpriv"
  grep -q "^$unpriv:" /etc/subgid 2>/dev/null || usermod --add-subgids 300000-365535 "$unpriv"
  chown -R "$unpriv" "$d"
  pass "as $unpriv (map mode)" runuser -u "$unpriv" -- env IMGBUILD_TEST_CACHE="$IMGBUILD_TEST_CACHE" \
    PATH=/usr/sbin:/usr/bin:/sbin:/bin $py -m pytest -p no:cacheprovider -v --durations=3 --basetemp "$d/t2" "$d/tests/torch"
  rm -rf "$d/t2"
  pass "as $unpriv (single-id mode)" runuser -u "$unpriv" -- env IMGBUILD_USERNS=single \
    IMGBUILD_TEST_CACHE="$IMGBUILD_TEST_CACHE" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    $py -m pytest -p no:cacheprovider -v --durations=3 --basetemp "$d/t3" "$d/tests/torch"
else
  export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild-tests}
  pass "as $(id -un)" env PATH=/usr/sbin:/usr/bin:/sbin:/bin $py -m pytest -p no:cacheprovider -v --durations=3 tests/torch
fi
exit $status
