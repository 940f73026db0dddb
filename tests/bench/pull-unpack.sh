#!/usr/bin/env bash
# Cold pull + unpack of an image from a local registry into a root
# filesystem: imgbuild beside its peers, in one run, on this machine.
#
#   sudo bash tests/bench/install-deps.sh     # once: the peers and tools
#   make                                      # bin/imgbuild
#   sudo bash tests/bench/pull-unpack.sh      # 20-45 min on 2 cores, by load
#
# Prints a Markdown table (tool, image, filesystem, median/min/max wall
# seconds, peak RSS, ratio to imgbuild) and the exact commands; keeps them
# and the raw numbers in $BENCH_OUT (default
# /var/tmp/imgbuild-bench/results/DATE). docs/benchmarks.md says what is
# measured and why.
#
# Run as root: every measured command runs as the unprivileged user
# $BENCH_USER (default imgbuild-bench, created here with a subordinate id
# range, as `useradd` gives every new user), since rootless is the point.
# Run as another user, the tools run as that user and stores are removed
# through `podman unshare`.
#
# What one run does:
#   1. checks the tools and names the Debian packages that are missing;
#   2. starts Debian's docker-registry on 127.0.0.1 over HTTP (every tool
#      but ch-image) and a second one over HTTPS with a throw-away
#      self-signed certificate on the same storage (ch-image speaks only
#      HTTPS); both stop by themselves after 3 h;
#   3. tests/bench/make-images.sh makes (once, cached) and pushes the two
#      images, Docker schema2 with gzip layers;
#   4. per filesystem in $BENCH_FS: one untimed warm-up per tool on the
#      small image (loads binaries into the page cache, checks each tool
#      works, finds imgbuild's mode), then per image $N rounds, each round
#      one cold run of every tool in turn (interleaved, so that load from
#      elsewhere on the machine spreads over all tools alike);
#   5. tests/bench/report.py writes the table.
# Cold: the run's store, rootfs and the user's container caches
# (~/.local/share/containers: blob-info cache) are deleted before each run,
# and podman's rootless pause process is ended after it; the page cache is
# not dropped (the registry's blobs stay in memory, as a warm registry's do),
# but `sync` runs before each run, so no write-back of the last one is due.
#
# Settings (environment):
#   IMGBUILD            imgbuild binary (default bin/imgbuild of this checkout)
#   IMGBUILD_UNPACK_MODE  auto (default) | unpack | pull+unpack: `unpack` is
#                       the one command `imgbuild --store S unpack REF DIR`
#                       on an empty store; pull+unpack runs `pull` first; auto
#                       uses unpack when the warm-up shows that it pulls
#   BENCH_FS            base directories, one per filesystem (default
#                       "/dev/shm /var/tmp": tmpfs and the ext4 root)
#   BENCH_IMAGES        "small big" (default), either, or "huge" (the
#                       CUDA-sized image, ~6 GiB unpacked: give it the ext4
#                       file system only, BENCH_FS=/var/tmp)
#   BENCH_TOOLS         default "imgbuild skopeo-umoci podman-overlay
#                       podman-vfs ch-image curl-gzip curl-pigz
#                       floor-download floor-inflate floor-untar"; also
#                       podman-fuse (overlay through fuse-overlayfs). The
#                       floor-* parts are tests/bench/floor.sh: the floor
#                       is the largest of their medians
#   BENCH_RUNS_SMALL, BENCH_RUNS_BIG   rounds per image (default 5 and 3;
#                       the second for big and huge)
#   BENCH_CH_IMAGE_CACHE  ch-image's build-cache flag (default --no-cache:
#                       with git installed the default would also commit
#                       the pulled tree into its git build cache)
#   BENCH_USER          the unprivileged user (default imgbuild-bench)
#   BENCH_OUT           results directory
#   IMGBUILD_BENCH_CACHE  images and registry storage (default /var/tmp/imgbuild-bench)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${IMGBUILD_BENCH_CACHE:-/var/tmp/imgbuild-bench}
imgbuild_src=${IMGBUILD:-$top/bin/imgbuild}
mode=${IMGBUILD_UNPACK_MODE:-auto}
fss=${BENCH_FS:-/dev/shm /var/tmp}
images=${BENCH_IMAGES:-small big}
tools=${BENCH_TOOLS:-imgbuild skopeo-umoci podman-overlay podman-vfs ch-image curl-gzip curl-pigz floor-download floor-inflate floor-untar}
runs_small=${BENCH_RUNS_SMALL:-5}
runs_big=${BENCH_RUNS_BIG:-3}
chcache=${BENCH_CH_IMAGE_CACHE:---no-cache}
out=${BENCH_OUT:-$cache/results/$(date -u +%Y%m%dT%H%M%SZ)}
sys_path=/usr/sbin:/usr/bin:/sbin:/bin
export PATH=$sys_path   # /usr/bin/python3 and Debian's tools, not a user's shims

say() { echo "bench: $*" >&2; }
die() { say "$*"; exit 1; }

# --- 1. tools ----------------------------------------------------------------
declare -A pkg_of=(
  [curl]=curl [gzip]=gzip [tar]=tar [openssl]=openssl [python3]=python3
  [docker-registry]=docker-registry [mmdebstrap]=mmdebstrap [skopeo]=skopeo
  [umoci]=umoci [/usr/bin/time]=time [newuidmap]=uidmap
)
for t in $tools; do
  case $t in
  podman-fuse) pkg_of[podman]=podman pkg_of[fuse-overlayfs]=fuse-overlayfs ;;
  podman-*) pkg_of[podman]=podman ;;
  ch-image) pkg_of[ch-image]=charliecloud-builders pkg_of[ch-run]=charliecloud-runtime ;;
  curl-pigz) pkg_of[pigz]=pigz ;;
  floor-inflate) pkg_of[igzip]=isal ;;
  floor-*) ;;
  imgbuild|skopeo-umoci|curl-gzip) ;;
  *) die "unknown tool '$t' in BENCH_TOOLS" ;;
  esac
done
missing=()
for c in "${!pkg_of[@]}"; do
  command -v "$c" >/dev/null 2>&1 || missing+=("${pkg_of[$c]}")
done
if [[ " $tools " == *" ch-image "* ]] && ! /usr/bin/python3 -c 'import lark' 2>/dev/null; then
  missing+=(python3-lark)
fi
if [ ${#missing[@]} -gt 0 ]; then
  die "missing Debian packages: $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')— install them with: sudo bash tests/bench/install-deps.sh"
fi
[ -x "$imgbuild_src" ] || die "no imgbuild binary at $imgbuild_src: run 'make' (or set IMGBUILD)"

# --- the unprivileged user ---------------------------------------------------
if [ "$(id -u)" -eq 0 ]; then
  user=${BENCH_USER:-imgbuild-bench}
  if ! id "$user" >/dev/null 2>&1; then
    say "creating user $user"
    useradd --create-home --shell /bin/bash "$user"
  fi
  grep -q "^$user:" /etc/subuid || say "warning: $user has no /etc/subuid range: podman and imgbuild run with one id"
  uhome=$(getent passwd "$user" | cut -d: -f6)
else
  user=$(id -un)
  uhome=$HOME
fi
uid=$(id -u "$user")

# What the user runs lives under $cache/bin (the checkout may not be
# readable by that user).
mkdir -p "$cache/bin" "$out"
install -m 755 "$imgbuild_src" "$cache/bin/imgbuild"
install -m 755 "$here/curl-tar.sh" "$cache/bin/curl-tar.sh"
install -m 755 "$here/floor.sh" "$cache/bin/floor.sh"
imgbuild=$cache/bin/imgbuild
chmod 755 "$cache" "$cache/bin"

# as_user DIR CMD...: runs CMD as the user, clean environment, XDG_RUNTIME_DIR=DIR.
as_user() {
  local xdg=$1; shift
  local envs=(HOME="$uhome" USER="$user" LOGNAME="$user" PATH="$sys_path" XDG_RUNTIME_DIR="$xdg" LANG=C.UTF-8)
  if [ "$(id -u)" -eq 0 ]; then
    (cd / && runuser -u "$user" -- env -i "${envs[@]}" "$@")
  else
    (cd / && env -i "${envs[@]}" "$@")
  fi
}
# wipe PATH...: removes trees that may hold files owned by subordinate ids.
wipe() {
  if [ "$(id -u)" -eq 0 ]; then
    rm -rf "$@"
  else
    podman unshare rm -rf "$@"
  fi
}
# Ends podman's rootless pause process (it keeps the user namespace alive
# between podman commands, which would make the next run warm).
end_pause() {
  local f=$1/libpod/tmp/pause.pid
  if [ -f "$f" ]; then
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  fi
}

# --- 2. registries -----------------------------------------------------------
regdir=$cache/registry
tlsdir=$cache/registry-tls
stop_all() {
  bash "$top/tests/lib/registry.sh" stop "$regdir" || true
  bash "$here/tls-registry.sh" stop "$tlsdir"
  for fs in $fss; do [ -d "$fs/imgbuild-bench-work" ] && wipe "$fs/imgbuild-bench-work"; done
}
trap stop_all EXIT
mkdir -p "$regdir"
bash "$top/tests/lib/registry.sh" stop "$regdir"
port=$(bash "$top/tests/lib/registry.sh" start "$regdir")
reg=127.0.0.1:$port
say "registry (HTTP) on $reg"

# The HTTPS twin, same storage, for ch-image.
tlsport=$(bash "$here/tls-registry.sh" start "$regdir" "$tlsdir") || die "HTTPS registry did not start"
treg=127.0.0.1:$tlsport
say "registry (HTTPS, same storage) on $treg"

# --- 3. images -----------------------------------------------------------------
say "making/pushing the images (tests/bench/make-images.sh)"
declare -A ref_of=()
while read -r name ref; do
  ref_of[$name]=${ref#"$reg"/}
done < <(IMGBUILD_BENCH_CACHE=$cache bash "$here/make-images.sh" "$reg" "$imgbuild" small $images)
[ -n "${ref_of[small]:-}" ] || die "make-images.sh failed"
# The floor's inputs (untimed, kept): each layer's blob and uncompressed tar.
declare -A floor_in=()
for img in small $images; do
  r=${ref_of[$img]:-}
  [ -n "$r" ] || continue
  floor_in[$img]=$cache/floor/$img-$(printf '%s' "$r" | sha256sum | cut -c1-12)
  if [[ " $tools " == *" floor-"* ]]; then
    say "floor inputs for $img in ${floor_in[$img]}"
    bash "$here/floor.sh" prepare "$reg" "${r%:*}" "${r##*:}" "${floor_in[$img]}"
    chmod -R a+rX "$cache/floor"
  fi
done
declare -A check_of=([small]=usr/bin/bash [big]=usr/bin/cmake [huge]=usr/share/texlive/texmf-dist/tex/latex/base/latex.ltx)

# Image facts for the report: layers and compressed bytes from the manifest.
: > "$out/images.tsv"
for img in $images; do
  r=${ref_of[$img]}
  # unpacked bytes and entries, where the floor's inputs counted them
  extra=()
  if [ -s "${floor_in[$img]}/entries" ]; then
    extra=("$(cat "${floor_in[$img]}/unpacked_bytes")" "$(cat "${floor_in[$img]}/entries")")
  fi
  curl -sSf -H "Accept: application/vnd.docker.distribution.manifest.v2+json" \
    "http://$reg/v2/${r%:*}/manifests/${r##*:}" \
    | /usr/bin/python3 -c 'import json,sys; m=json.load(sys.stdin); print(*sys.argv[1:3], len(m["layers"]), sum(l["size"] for l in m["layers"]), *sys.argv[3:], sep="\t")' \
      "$img" "$reg/$r" "${extra[@]}" >> "$out/images.tsv"
done

# --- 4. runs -------------------------------------------------------------------
# command_of TOOL IMAGE W: the shell command one run executes (as the user), W
# its empty work directory.
command_of() {
  local tool=$1 r=${ref_of[$2]} w=$3
  case $tool in
  imgbuild)
    if [ "$mode" = pull+unpack ]; then
      echo "$imgbuild --store $w/store -q pull $reg/$r >/dev/null && $imgbuild --store $w/store -q unpack $reg/$r $w/rootfs"
    else
      echo "$imgbuild --store $w/store -q unpack $reg/$r $w/rootfs"
    fi ;;
  skopeo-umoci)
    echo "skopeo copy -q --src-tls-verify=false docker://$reg/$r oci:$w/oci:bench && umoci unpack --rootless --image $w/oci:bench $w/bundle" ;;
  podman-overlay|podman-vfs)
    echo "podman --root $w/graph --runroot $w/run --storage-driver ${tool#podman-} pull -q --tls-verify=false $reg/$r" ;;
  podman-fuse)
    echo "podman --root $w/graph --runroot $w/run --storage-driver overlay --storage-opt overlay.mount_program=/usr/bin/fuse-overlayfs pull -q --tls-verify=false $reg/$r" ;;
  ch-image)
    echo "ch-image $chcache -s $w/storage --tls-no-verify pull $treg/$r" ;;
  curl-gzip|curl-pigz)
    echo "$cache/bin/curl-tar.sh $reg ${r%:*} ${r##*:} $w/rootfs ${tool#curl-} $w/rss" ;;
  floor-download)
    echo "$cache/bin/floor.sh download $reg ${r%:*} ${r##*:}" ;;
  floor-inflate)
    echo "$cache/bin/floor.sh inflate ${floor_in[$2]}" ;;
  floor-untar)
    echo "$cache/bin/floor.sh untar ${floor_in[$2]} $w/rootfs" ;;
  esac
}
# unpacked TOOL IMAGE W: true when the run left the image's files where the tool puts them.
unpacked() {
  local tool=$1 f=${check_of[$2]} w=$3
  case $tool in
  imgbuild|curl-*|floor-untar) [ -e "$w/rootfs/$f" ] ;;
  floor-download|floor-inflate) true ;;
  skopeo-umoci) [ -e "$w/bundle/rootfs/$f" ] ;;
  podman-*) compgen -G "$w/graph/overlay/*/diff/$f" >/dev/null || compgen -G "$w/graph/vfs/dir/*/$f" >/dev/null ;;
  ch-image) compgen -G "$w/storage/img/*/$f" >/dev/null ;;
  esac
}
# one FS TOOL IMAGE LABEL: one cold run; appends to raw.tsv unless LABEL is "warm-up".
one() {
  local fs=$1 tool=$2 img=$3 label=$4
  # Not $cache, which may be on the same filesystem: this tree is removed at the end.
  local base=$fs/imgbuild-bench-work w=$fs/imgbuild-bench-work/run xdg=$fs/imgbuild-bench-work/xdg
  wipe "$w" "$xdg" "$uhome/.local/share/containers"
  mkdir -p "$w" "$xdg" && chown "$user" "$base" "$w" "$xdg" && chmod 700 "$xdg"
  rm -f "$base/time" "$base/log"
  local cmd; cmd=$(command_of "$tool" "$img" "$w")
  printf '%s\t%s\t%s\n' "$tool" "$img" "$cmd" >> "$out/commands.raw"
  local rc=0
  # no write-back of the previous run's files left to slow this one down
  sync
  as_user "$xdg" /usr/bin/time -f '%e %M %U %S' -o "$base/time" bash -c "$cmd" >"$base/log" 2>&1 || rc=$?
  case $tool in podman-*) end_pause "$xdg" ;; esac
  local wall=0 rss=0 usr=0 sys=0 status=ok
  [ -s "$base/time" ] && read -r wall rss usr sys < <(tail -n 1 "$base/time")
  # The pipeline's own sum of peak RSS (its processes run at once).
  [ -s "$w/rss" ] && rss=$(cat "$w/rss")
  if [ $rc -ne 0 ] || ! unpacked "$tool" "$img" "$w"; then
    status=failed
    say "$tool $img on $fs: FAILED (exit $rc): $(tail -n 3 "$base/log" | tr '\n' ' ')"
  fi
  if [ "$label" != warm-up ]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$img" "$fs" "$label" "$wall" "$rss" "$status" >> "$out/raw.tsv"
    # CPU seconds (user + system, the command's children included)
    [ $status = ok ] && printf '%s\t%s\t%s\t%s\n' "$tool" "$img" "$fs" \
      "$(/usr/bin/python3 -c "print(round($usr + $sys, 2))")" >> "$out/cpu.tsv"
  fi
  say "$(printf '%-7s %-5s %-9s %-15s %7.2f s %6d MiB %s' "$label" "$img" "$fs" "$tool" "$wall" $((rss / 1024)) "$status")"
  wipe "$w"
  [ $status = ok ]
}

printf 'tool\timage\tfs\trun\twall_s\tpeak_rss_kib\tstatus\n' > "$out/raw.tsv"
: > "$out/cpu.tsv"
: > "$out/commands.raw"
{
  echo "date	$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu	$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
  echo "memory	$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "kernel	$(uname -sr)"
  echo "loadavg_start	$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "imgbuild	$("$imgbuild" version) ($(git -C "$top" describe --always --dirty 2>/dev/null || echo '?'))"
  echo "skopeo	$(skopeo --version)"
  echo "umoci	$(umoci --version)"
  command -v podman >/dev/null && echo "podman	$(podman --version)"
  command -v ch-image >/dev/null && echo "ch-image	$(USER=$user ch-image --version 2>&1)"
  echo "curl	$(curl --version | head -n1 | cut -d' ' -f1-2)"
  echo "gzip	$(gzip --version | head -n1)"
  command -v pigz >/dev/null && echo "pigz	$(pigz --version 2>&1)"
  echo "tar	$(tar --version | head -n1)"
  for fs in $fss; do echo "fs	$fs	$(df -T "$fs" | awk 'NR==2 {print $2}')"; done
} > "$out/meta.tsv"

start=$(date +%s)
for fs in $fss; do
  [ -d "$fs" ] || die "no directory $fs (BENCH_FS)"
  case $cache/ in "$fs/imgbuild-bench-work/"*) die "IMGBUILD_BENCH_CACHE must not be under $fs/imgbuild-bench-work" ;; esac
  say "== $fs ($(df -T "$fs" | awk 'NR==2 {print $2}'))"
  for tool in $tools; do
    if [ "$tool" = imgbuild ] && [ "$mode" = auto ]; then
      # Does `unpack` pull a missing image by itself?
      if one "$fs" imgbuild small warm-up 2>/dev/null; then mode=unpack; else mode=pull+unpack; fi
      say "imgbuild mode: $mode"
    fi
    one "$fs" "$tool" small warm-up || die "$tool does not work here (see above)"
  done
  for img in $images; do
    n=$runs_small; [ "$img" != small ] && n=$runs_big
    for i in $(seq 1 "$n"); do
      for tool in $tools; do
        one "$fs" "$tool" "$img" "$i/$n" || true
      done
    done
  done
done
echo "loadavg_end	$(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/meta.tsv"
echo "total_s	$(( $(date +%s) - start ))" >> "$out/meta.tsv"
echo "imgbuild_mode	$mode" >> "$out/meta.tsv"
# One command line per tool and image (the work directory shown as W).
/usr/bin/python3 - "$out" <<'PY'
import sys, re
out = sys.argv[1]
seen = {}
for line in open(out + "/commands.raw"):
    tool, img, cmd = line.rstrip("\n").split("\t", 2)
    seen[(tool, img)] = re.sub(r"\S*/imgbuild-bench-work/run", "W", cmd)
with open(out + "/commands.tsv", "w") as f:
    for (tool, img), cmd in seen.items():
        f.write(f"{tool}\t{img}\t{cmd}\n")
PY
rm -f "$out/commands.raw"

# --- 5. report -----------------------------------------------------------------
/usr/bin/python3 "$here/report.py" "$out" | tee "$out/table.md"
say "results in $out"
