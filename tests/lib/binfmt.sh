#!/usr/bin/env bash
# Make sure the kernel runs arm64 and arm binaries through qemu-user
# (Debian's qemu-user-static, registered by binfmt-support with the F
# flag), for the multi-platform tests (tests/e2e/test_platforms.py).  As
# root: binfmt_misc is mounted when it is not (a container or a machine
# without systemd's proc-sys-fs-binfmt_misc.automount), and the two
# handlers are enabled when they are missing (the packages' postinst
# registers nothing when binfmt_misc was not mounted then).  Prints what
# it did; exits non-zero when the handlers are still missing.
set -uo pipefail
dir=/proc/sys/fs/binfmt_misc
if [ ! -e "$dir/status" ]; then
  mount -t binfmt_misc binfmt_misc "$dir" && echo "binfmt: mounted binfmt_misc at $dir" >&2
fi
status=0
for h in qemu-aarch64 qemu-arm; do
  if [ ! -e "$dir/$h" ]; then
    update-binfmts --enable "$h" >&2 || update-binfmts --import "$h" >&2
  fi
  if grep -qx enabled "$dir/$h" 2>/dev/null; then
    echo "binfmt: $h: $(grep -E '^(interpreter|flags)' "$dir/$h" | tr '\n' ' ')" >&2
  else
    echo "binfmt: $h is not registered (qemu-user-static, binfmt-support)" >&2
    status=1
  fi
done
exit $status
