#!/usr/bin/env bash
# `make demo`: install what is missing, build imgbuild, start a local
# registry, put a Debian bookworm base image in it, build recipes/demo.recipe.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then
  bash tests/install-deps.sh
else
  bash tests/install-deps.sh || { echo "demo: run 'sudo make deps' first" >&2; exit 1; }
fi
make -s all
regdir=$(mktemp -d /tmp/imgbuild-demo-registry.XXXXXX)
trap 'bash tests/lib/registry.sh stop "$regdir"; rm -rf "$regdir"' EXIT
port=$(bash tests/lib/registry.sh start "$regdir")
echo "demo: registry on 127.0.0.1:$port"
bash tests/lib/base-image.sh "127.0.0.1:$port" >/dev/null
start=$(date +%s)
bin/imgbuild recipes/demo.recipe --build-arg "REGISTRY=127.0.0.1:$port"
echo "demo: built in $(( $(date +%s) - start )) s"
ls -l dist/markupsafe-O2/
bin/imgbuild run demo-client:latest -- python3 -c 'import markupsafe, markupsafe._speedups; print("markupsafe", markupsafe.__version__, "with C speedups")'
