#!/usr/bin/env bash
# The e2e suite (pytest driving bin/imgbuild), once as the calling user and,
# when that is root, twice more as an unprivileged user created here (with
# subordinate ids: map mode; then forced to the single-id mode); the
# unit test binaries (already run by `make unit` as the caller) run as that
# user too.
#
# Arguments (optional) name test files or node ids under tests/e2e
# (`bash tests/run-e2e.sh test_escape.py test_identity.py::test_chown`):
# only those run, in every pass.  IMGBUILD_BIN names the binary to test
# (default bin/imgbuild).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
bin=${IMGBUILD_BIN:-bin/imgbuild}
selected=("$@")
py=/usr/bin/python3
unpriv=${IMGBUILD_TEST_USER:-imgbuild-test}
status=0

# Stopped (Ctrl-C, kill): the EXIT trap still cleans up (bash runs it on
# exit, not on a fatal signal).
trap 'exit 130' INT
trap 'exit 143' TERM

pass_no=0
run_suite() { # label, then the command prefix to run pytest with
  local label=$1; shift
  echo "== e2e as $label"
  # Each pass has its own base temp (and TMPDIR beside it, on the same
  # scratch file system), removed when the pass ends (as root,
  # which can also remove what subordinate ids own), so passes do not pile
  # up tens of GB in /tmp as pytest's kept-three base temps would.
  local extra=() bt=
  if [ "$(id -u)" -eq 0 ]; then
    pass_no=$((pass_no + 1)); bt="$e2e_dir/tmp-$pass_no"
    mkdir -p "$bt" "$bt-tmp" && chown "$(stat -c %u "$e2e_dir")" "$bt" "$bt-tmp"
    extra=(--basetemp "$bt")
  fi
  "$@" env IMGBUILD_TEST_CACHE="$IMGBUILD_TEST_CACHE" PATH=/usr/sbin:/usr/bin:/sbin:/bin ${bt:+TMPDIR="$bt-tmp"} \
    $py -m pytest -p no:cacheprovider -v -rs "${extra[@]}" "${targets[@]}" || status=1
  if [ -n "$bt" ]; then
    echo "== disk after this pass: $(du -sh "$bt" | cut -f1) left in its base temp; $(df -h --output=avail "$bt" | tail -1 | tr -d ' ') free"
    rm -rf "$bt" "$bt-tmp"
  fi
}

# The suite's scratch tree on a file system of its own: a fresh ext4 with
# a journal, in a sparse file, mounted on $e2e_dir (as root only).  The
# suite creates and deletes millions of files; on an ext4 without a
# journal (CI's and this machine's root file system) every new inode is
# then checked against the inode table for a recent deletion
# (ext4's recently_deleted), and the kernel time grew until a pass took
# three times as long (test_layers.py: 220 s there, 68 s here;
# docs/benchmarks.md).  Where no loop device can be had, the suite runs in
# /tmp as before, saying so.  IMGBUILD_E2E_SCRATCH=tmp keeps it in /tmp.
scratch_img=
scratch_fs() {
  [ "${IMGBUILD_E2E_SCRATCH:-loop}" = loop ] || return 0
  local dir=/var/tmp avail size
  avail=$(df --output=avail -B1G "$dir" | tail -1 | tr -d ' ')
  size=$(( avail - 4 ))               # GiB; the file grows only as it is written
  [ "$size" -le 64 ] || size=64
  if [ "$size" -lt 24 ]; then
    echo "== warning: ${avail}G free in $dir: the suite's scratch stays in /tmp" >&2
    return 0
  fi
  scratch_img=$(mktemp "$dir/imgbuild-e2e.XXXXXX.ext4")
  # lazily: a test server still running keeps the mount busy
  trap 'umount -l "$e2e_dir" 2>/dev/null; rm -rf "$e2e_dir" "$scratch_img"' EXIT
  if truncate -s "${size}G" "$scratch_img" && mkfs.ext4 -q -F -m 0 "$scratch_img" \
     && mount -o loop "$scratch_img" "$e2e_dir"; then
    echo "== scratch: ext4 with a journal on $e2e_dir (${size}G sparse file $scratch_img)"
  else
    echo "== warning: no loop-mounted scratch file system: the suite's scratch stays in /tmp" >&2
    rm -f "$scratch_img"; scratch_img=
  fi
}

select_targets() { # after e2e_dir is known
  targets=()
  local t
  for t in "${selected[@]}"; do targets+=("$e2e_dir/tests/e2e/$t"); done
  [ ${#targets[@]} -gt 0 ] || targets=("$e2e_dir/tests/e2e")
}

if [ "$(id -u)" -eq 0 ]; then
  export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-/var/tmp/imgbuild-tests}
  mkdir -p "$IMGBUILD_TEST_CACHE" && chmod 755 "$IMGBUILD_TEST_CACHE"
  # A copy of what the suite needs, readable by the unprivileged user even
  # when the checkout lives under /root.
  e2e_dir=$(mktemp -d /tmp/imgbuild-e2e.XXXXXX)
  trap 'rm -rf "$e2e_dir"' EXIT
  scratch_fs
  mkdir -p "$e2e_dir/bin"
  cp "$bin" "$e2e_dir/bin/imgbuild"
  # (Makefile, docs, completions: test_install.py's `make install`)
  cp -r tests recipes docs completions Makefile README.md "$e2e_dir/"
  chmod -R a+rX "$e2e_dir"
  select_targets
  # arm64 steps run through qemu-user (tests/lib/binfmt.sh); a failure is
  # not fatal here: the multi-platform tests then fail saying why.
  bash tests/lib/binfmt.sh || echo "== warning: no qemu-user handlers in binfmt_misc" >&2
  # The base image tarballs (amd64, arm64) are made once, as root
  # (mmdebstrap), for both runs.
  d=$(mktemp -d) && port=$(bash tests/lib/registry.sh start "$d") \
    && bash tests/lib/multiarch-image.sh "127.0.0.1:$port" >/dev/null; bash tests/lib/registry.sh stop "$d"; rm -rf "$d"
  # The S3 server of tests/e2e/test_artifact.py, installed once with npm
  # for both runs (tests/lib/s3.sh).
  # A failure here is not fatal: the artifact tests then fail saying why.
  bash tests/lib/s3.sh install || echo "== warning: the S3 test server could not be installed" >&2
  # dockerfile-ast, the independent parser that
  # tests/e2e/test_recipe_corpus_crosscheck.py checks the recipe corpus
  # against (tests/lib/dockerfile-ast.sh); the same: not fatal here.
  bash tests/lib/dockerfile-ast.sh install || echo "== warning: dockerfile-ast could not be installed" >&2
  chmod -R a+rX "$IMGBUILD_TEST_CACHE"
  id "$unpriv" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$unpriv"
  # Debian's useradd gives new users subordinate id ranges; make sure this
  # one has them, so that the unprivileged run covers the map mode
  # (newuidmap); a last run forces the single-id mode (seccomp root
  # emulation), the one unprivileged CI runners without ranges get.  The
  # user exists before the root pass: test_identity builds in all three
  # modes from there, map mode as this user.
  grep -q "^$unpriv:" /etc/subuid 2>/dev/null || usermod --add-subuids 300000-365535 "$unpriv"
  grep -q "^$unpriv:" /etc/subgid 2>/dev/null || usermod --add-subgids 300000-365535 "$unpriv"
  run_suite root
  chown -R "$unpriv" "$e2e_dir"
  if [ ${#selected[@]} -eq 0 ]; then  # a selection runs e2e tests only
    echo "== unit tests as unprivileged user $unpriv"
    mkdir -p "$e2e_dir/unit" && cp build/tests/test_* "$e2e_dir/unit/" && chmod -R a+rX "$e2e_dir/unit"
    for t in "$e2e_dir"/unit/test_*; do
      echo "== $(basename "$t") as $unpriv"
      (cd "$e2e_dir" && runuser -u "$unpriv" -- "$t") || status=1  # tests/ of the copy: the checkout may be unreadable to the user
    done
    echo "== test_sandbox as $unpriv, single-id mode"
    (cd "$e2e_dir" && runuser -u "$unpriv" -- env IMGBUILD_USERNS=single "$e2e_dir/unit/test_sandbox") || status=1
  fi
  if [ "${IMGBUILD_E2E_SERIAL:-0}" = 1 ]; then
    run_suite "unprivileged user $unpriv (map mode)" runuser -u "$unpriv" --
    run_suite "unprivileged user $unpriv (single-id mode)" runuser -u "$unpriv" -- env IMGBUILD_USERNS=single
  else
    # The two unprivileged passes run at once, each with its own base temp,
    # registries and log (printed when it ends): much of a pass waits on
    # the disk, and serially the suite no longer fit CI's time on 2 cores
    # (docs/benchmarks.md).  IMGBUILD_E2E_SERIAL=1 runs them one by one.
    logs=$(mktemp -d)
    (pass_no=1; run_suite "unprivileged user $unpriv (map mode)" runuser -u "$unpriv" --
     exit $status) > "$logs/map" 2>&1 &
    map_pid=$!
    (pass_no=2; run_suite "unprivileged user $unpriv (single-id mode)" runuser -u "$unpriv" -- \
       env IMGBUILD_USERNS=single
     exit $status) > "$logs/single" 2>&1 &
    single_pid=$!
    wait "$map_pid" || status=1
    cat "$logs/map"
    wait "$single_pid" || status=1
    cat "$logs/single"
    rm -rf "$logs"
  fi
else
  export IMGBUILD_TEST_CACHE=${IMGBUILD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild-tests}
  e2e_dir=$repo
  select_targets
  [ "$bin" = bin/imgbuild ] || export IMGBUILD="$repo/$bin"
  run_suite "$(id -un) (unprivileged; run as root to cover both)"
fi
exit $status
