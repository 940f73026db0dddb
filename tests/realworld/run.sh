#!/usr/bin/env bash
# make e2e-realworld: real-world Dockerfiles built unchanged
# (tests/realworld/test_*.py), as the calling user and, when that is root,
# again as the unprivileged user of tests/run-e2e.sh (map mode).  Needs the
# Debian mirror once (stand-in images, sources; kept in the test cache).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
unpriv=${IMGBUILD_TEST_USER:-imgbuild-test}
status=0
if [ "$(id -u)" -eq 0 ]; then
  export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-/var/tmp/imgbuild-tests}
  mkdir -p "$IMGBUILD_TEST_CACHE" && chmod 755 "$IMGBUILD_TEST_CACHE"
  d=$(mktemp -d /tmp/imgbuild-realworld.XXXXXX)
  trap 'rm -rf "$d"' EXIT
  mkdir -p "$d/bin" && cp bin/imgbuild "$d/bin/" && cp -r tests "$d/"
  # the stand-in images are made once, as root (mmdebstrap)
  r=$(mktemp -d) && port=$(bash tests/lib/registry.sh start "$r") \
    && bash tests/realworld/standins.sh "127.0.0.1:$port"; bash tests/lib/registry.sh stop "$r"; rm -rf "$r"
  chmod -R a+rX "$IMGBUILD_TEST_CACHE" "$d"
  echo "== real-world Dockerfiles as root"
  mkdir -p "$d/t1"
  env PATH=/usr/sbin:/usr/bin:/sbin:/bin $py -m pytest -p no:cacheprovider -v --basetemp "$d/t1" \
    "$d/tests/realworld" || status=1
  rm -rf "$d/t1"
  id "$unpriv" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$unpriv"
  grep -q "^$unpriv:" /etc/subuid 2>/dev/null || usermod --add-subuids 300000-365535 "$unpriv"
  grep -q "^$unpriv:" /etc/subgid 2>/dev/null || usermod --add-subgids 300000-365535 "$unpriv"
  chown -R "$unpriv" "$d"
  echo "== real-world Dockerfiles as $unpriv"
  runuser -u "$unpriv" -- env IMGBUILD_TEST_CACHE="$IMGBUILD_TEST_CACHE" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    $py -m pytest -p no:cacheprovider -v --basetemp "$d/t2" "$d/tests/realworld" || status=1
else
  export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild-tests}
  env PATH=/usr/sbin:/usr/bin:/sbin:/bin $py -m pytest -p no:cacheprovider -v tests/realworld || status=1
fi
exit $status
