#!/usr/bin/env bash
# Installs what building and testing imgbuild needs, from Debian's packages.
# Used by `make deps`, `make demo` and .ci/run.  Needs root (apt-get).
set -euo pipefail
pkgs=(
  # build
  build-essential pkg-config
  # make lint: clang's -fsyntax-only finds gotos over cleanup variables
  clang
  libcurl4-openssl-dev libjansson-dev libarchive-dev libssl-dev libzstd-dev
  libseccomp-dev zlib1g-dev libisal-dev libcmocka-dev libyaml-dev
  # wheel audit (builder/wheel/elf.c): ELF objects through elfutils' libelf
  libelf-dev
  # artifact repository (builder/artifact/s3.c): S3's XML replies through libxml2
  libxml2-dev
  # sandbox: newuidmap/newgidmap for subordinate id ranges
  uidmap
  # tests and demo: local registry, base images, independent readers of our output
  docker-registry mmdebstrap skopeo umoci busybox-static
  # conformance test (tests/e2e/test_buildah_compat.py): the same recipes built by buildah
  buildah
  python3 python3-pytest ca-certificates curl gzip zstd unzip
  # tests/e2e/test_progress.py: what an 80-column terminal shows (a VT100 emulator)
  python3-pyte
  # tests/run-e2e.sh: the suite's scratch on a loop-mounted ext4 (mkfs.ext4, mount)
  e2fsprogs mount
  # auth tests: htpasswd (bcrypt) for the basic-auth registry; openssl and
  # python3-cryptography for the token server's key, certificate and JWTs
  apache2-utils openssl python3-cryptography
  # wheel tests (tests/e2e/test_wheel.py): fixture extensions built into wheels
  # on the host; wheel repair edits ELF objects with patchelf
  g++ python3-dev python3-setuptools python3-wheel patchelf
  # make man / make install: man pages cut from docs/cli.md by go-md2man;
  # tests/e2e/test_install.py reads them with man-db's man
  go-md2man man-db
  # build --slurm tests (tests/lib/slurm.sh): a one-host Slurm cluster with
  # its own munged
  slurmctld slurmd slurm-client munge
  # TLS e2e tests: a test CA and certificates made at test time
  # (openssl above also makes the TLS tests' CA and certificates)
  # multi-platform tests (tests/e2e/test_platforms.py): arm64 steps through
  # qemu-user in binfmt_misc (tests/lib/binfmt.sh), an arm64 base image
  # made by mmdebstrap (arch-test: its check of a foreign architecture)
  qemu-user-static binfmt-support arch-test
  # ... the stand-in torch wheel's aarch64 library (Debian's cross compiler)
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  # ... and a pushed index run by another runtime: podman run --arch arm64
  # (runc: crun refuses hybrid cgroup hierarchies)
  podman runc
)
# artifact repository e2e tests (tests/lib/s3.sh): an S3 server from npm,
# run with Node.js; so is the Dockerfile parser that the recipe corpus is
# cross-checked against (tests/lib/dockerfile-ast.sh).  A machine that has
# node and npm already (another distribution of them) keeps its own.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  pkgs+=(nodejs npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run 'sudo make deps'" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
