#!/usr/bin/env bash
# Layers: imgbuild beside its peers at the two ends of a layer's life, in
# one run, on this machine, every store and tree on tmpfs.
#
#   sudo bash tests/bench/install-deps.sh     # once: the peers and tools
#   make                                      # bin/imgbuild
#   sudo bash tests/bench/layers.sh           # about 25 min on 2 cores, by load
#   sudo bash tests/bench/layers.sh --quick   # 1 round, no warm-up: ~6 min
#
# A. unpack: the big four-layer image of tests/bench/make-images.sh (774.7
#    MiB of gzip layers, 2.5 GB of tar) into a directory tree from LOCAL
#    blobs, no network: imgbuild from a store that holds the image's blobs
#    (pulled once, no snapshot), umoci unpack --rootless from an OCI layout,
#    and the lower bounds gzip|tar, pigz|tar, zstd|tar (zstd -3
#    recompressions of the same tars) and tar -x of the uncompressed tars.
#    The registry is stopped before the first timed run, so nothing timed
#    can reach it.
# B. write: one layer (tar + sha256 + compress) of the Debian bookworm
#    minbase tree (~170 MB, 8,729 entries): imgbuild (a recipe `FROM
#    scratch` / `COPY tree/ /` / `OUTPUT type=oci`, the whole build
#    timed, and the COPY step alone from imgbuild's own log lines),
#    buildah commit of a scratch container holding the tree, and the lower
#    bounds tar | gzip -6, | pigz, | zstd -3 -T0 and tar alone, each also
#    hashing the tar and the compressed stream with sha256sum.
# docs/benchmarks.md ("Layers") says what is measured and why.
#
# Prints a Markdown table (tool, part, median/min/max wall seconds, peak
# RSS, ratios to imgbuild) and the exact commands; keeps them and the raw
# numbers in $BENCH_OUT (default /var/tmp/imgbuild-bench/results/layers-DATE).
#
# Options (or the environment variable after each):
#   --part unpack|write|all    which measurement (BENCH_PART, default all)
#   --rounds N                 rounds (BENCH_RUNS, default 5)
#   --slow-rounds N            rounds for a tool whose warm-up took over
#                              20 s (BENCH_RUNS_SLOW, default 3)
#   --quick                    1 round and no warm-up: checks the harness
#   --tools "T..."             only these tools (BENCH_TOOLS; names as in
#                              the table, e.g. "imgbuild umoci tar-gzip")
# Other settings (environment):
#   IMGBUILD             imgbuild binary (default bin/imgbuild of this checkout)
#   BENCH_FS             the tmpfs for stores and trees (default /dev/shm;
#                        needs about 9 GiB free for part A)
#   BENCH_USER           the unprivileged user (default imgbuild-bench)
#   BENCH_OUT            results directory
#   IMGBUILD_BENCH_CACHE images and registry storage (default /var/tmp/imgbuild-bench)
#
# Run as root: every measured command runs as the unprivileged user
# $BENCH_USER (created here if missing, with a subordinate id range), since
# rootless is the point; run as another user, the tools run as that user.
# The page cache cannot be dropped (that needs root and would also drop
# the inputs): every input is on tmpfs, in memory, in every run alike.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${IMGBUILD_BENCH_CACHE:-/var/tmp/imgbuild-bench}
imgbuild_src=${IMGBUILD:-$top/bin/imgbuild}
part=${BENCH_PART:-all}
runs=${BENCH_RUNS:-5}
runs_slow=${BENCH_RUNS_SLOW:-3}
only_tools=${BENCH_TOOLS:-}
fs=${BENCH_FS:-/dev/shm}
quick=0
slow_s=20
out=${BENCH_OUT:-$cache/results/layers-$(date -u +%Y%m%dT%H%M%SZ)}
sys_path=/usr/sbin:/usr/bin:/sbin:/bin
export PATH=$sys_path   # /usr/bin/python3 and Debian's tools, not a user's shims

say() { echo "bench: $*" >&2; }
die() { say "$*"; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }

while [ $# -gt 0 ]; do
  case $1 in
  --part) part=${2:?}; shift 2 ;;
  --part=*) part=${1#*=}; shift ;;
  --rounds) runs=${2:?}; shift 2 ;;
  --rounds=*) runs=${1#*=}; shift ;;
  --slow-rounds) runs_slow=${2:?}; shift 2 ;;
  --slow-rounds=*) runs_slow=${1#*=}; shift ;;
  --tools) only_tools=${2:?}; shift 2 ;;
  --tools=*) only_tools=${1#*=}; shift ;;
  --quick) quick=1; shift ;;
  -h|--help) usage 0 ;;
  *) say "unknown option $1"; usage ;;
  esac
done
case $part in
unpack|write) parts=$part ;;
all) parts="unpack write" ;;
*) die "--part: expected unpack, write or all, got '$part'" ;;
esac
[ "$quick" = 1 ] && runs=1 runs_slow=1

# --- 1. tools ----------------------------------------------------------------
declare -A pkg_of=(
  [curl]=curl [gzip]=gzip [pigz]=pigz [zstd]=zstd [tar]=tar [python3]=python3
  [docker-registry]=docker-registry [skopeo]=skopeo [umoci]=umoci
  [buildah]=buildah [/usr/bin/time]=time [newuidmap]=uidmap
)
missing=()
for c in "${!pkg_of[@]}"; do
  command -v "$c" >/dev/null 2>&1 || missing+=("${pkg_of[$c]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  die "missing Debian packages: $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')— install them with: sudo bash tests/bench/install-deps.sh"
fi
[ -x "$imgbuild_src" ] || die "no imgbuild binary at $imgbuild_src: run 'make' (or set IMGBUILD)"
[ -d "$fs" ] || die "no directory $fs (BENCH_FS)"

# --- the unprivileged user (as tests/bench/pull-unpack.sh) --------------------
if [ "$(id -u)" -eq 0 ]; then
  user=${BENCH_USER:-imgbuild-bench}
  if ! id "$user" >/dev/null 2>&1; then
    say "creating user $user"
    useradd --create-home --shell /bin/bash "$user"
  fi
  grep -q "^$user:" /etc/subuid || say "warning: $user has no /etc/subuid range: buildah and imgbuild run with one id"
  uhome=$(getent passwd "$user" | cut -d: -f6)
else
  user=$(id -un)
  uhome=$HOME
fi

# What the user runs lives under $cache/bin (the checkout may not be
# readable by that user).
mkdir -p "$cache/bin" "$out"
install -m 755 "$imgbuild_src" "$cache/bin/imgbuild-layers"
install -m 755 "$here/tar-layers.sh" "$cache/bin/tar-layers.sh"
install -m 755 "$here/layers-tree.py" "$cache/bin/layers-tree.py"
imgbuild=$cache/bin/imgbuild-layers
tarl=$cache/bin/tar-layers.sh
treepy=$cache/bin/layers-tree.py
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
end_pause() {
  local f=$1/libpod/tmp/pause.pid
  if [ -f "$f" ]; then
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  fi
}

base=$fs/imgbuild-bench-layers   # everything of this run; removed at the end
in=$base/in                      # inputs, made once per run (untimed)
w=$base/run                      # one run's work directory
xdg=$base/xdg
case $cache/ in "$base/"*) die "IMGBUILD_BENCH_CACHE must not be under $base" ;; esac
regdir=$cache/registry
stop_all() {
  bash "$top/tests/lib/registry.sh" stop "$regdir" 2>/dev/null || true
  [ -d "$base" ] && wipe "$base"
  return 0
}
trap stop_all EXIT
wipe "$base"
mkdir -p "$in" "$xdg" && chown "$user" "$base" "$in" "$xdg" && chmod 700 "$xdg"
run_user() { as_user "$xdg" "$@"; }

# Which --compression values this imgbuild's build takes (none before the flag).
imgbuild_comps=$("$imgbuild" --help 2>&1 | grep -o -- '--compression [a-z|]*' | head -n1 | cut -d' ' -f2 | tr '|' ' ' || true)

# Tool lists per part.
unpack_tools="imgbuild imgbuild-zstd umoci tar-gzip tar-pigz tar-zstd tar-none"
write_tools="imgbuild"
for c in zstd none; do
  [[ " $imgbuild_comps " == *" $c "* ]] && write_tools+=" imgbuild-$c"
done
write_tools+=" tar-gzip tar-pigz tar-zstd tar-none buildah-gzip buildah-zstd buildah-none"
pick() {   # pick LIST: LIST filtered by --tools
  local t r=""
  for t in $1; do
    if [ -z "$only_tools" ] || [[ " $only_tools " == *" $t "* ]]; then r+="$t "; fi
  done
  echo "$r"
}
unpack_tools=$(pick "$unpack_tools")
write_tools=$(pick "$write_tools")

# --- 2. inputs of part A (untimed) ---------------------------------------------
layer_blobs=() layer_tars=() layer_zsts=()
ref="" zref=""
prepare_unpack() {
  say "A: registry, images (tests/bench/make-images.sh; cached in $cache)"
  mkdir -p "$regdir"
  bash "$top/tests/lib/registry.sh" stop "$regdir"
  local port; port=$(bash "$top/tests/lib/registry.sh" start "$regdir")
  local reg=127.0.0.1:$port
  local line
  line=$(IMGBUILD_BENCH_CACHE=$cache bash "$here/make-images.sh" "$reg" "$imgbuild" big | grep '^big ') \
    || die "make-images.sh failed"
  ref=${line#big }
  if [[ " $unpack_tools " == *" imgbuild-zstd "* ]]; then
    zref=$reg/bench/build:zstd
    # Made once: stays in the registry's storage under $cache.
    if ! curl -sf -o /dev/null -H "Accept: application/vnd.oci.image.manifest.v1+json" \
        "http://$reg/v2/bench/build/manifests/zstd"; then
      say "A: pushing a zstd variant of the big image as $zref (once)"
      skopeo copy --quiet --format oci --dest-compress --dest-compress-format zstd \
        --dest-tls-verify=false "oci:$cache/build-oci:build" "docker://$zref" >&2
    fi
  fi
  say "A: OCI layout (skopeo copy) and imgbuild stores (imgbuild pull) on $fs"
  run_user skopeo copy -q --src-tls-verify=false "docker://$ref" "oci:$in/layout:bench"
  run_user "$imgbuild" --store "$in/store" -q pull "$ref" >/dev/null
  [ -n "$zref" ] && run_user "$imgbuild" --store "$in/store-zstd" -q pull "$zref" >/dev/null
  [ -z "$(ls -A "$in/store/snapshots" 2>/dev/null)" ] || die "imgbuild pull left snapshots in the store: unpack would copy, not unpack"
  mapfile -t layer_blobs < <(/usr/bin/python3 - "$in/layout" <<'PY'
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][0]["digest"].split(":")[1]))
for l in m["layers"]:
    assert l["mediaType"].endswith("gzip"), l["mediaType"]
    print(d + "/blobs/sha256/" + l["digest"].split(":")[1])
PY
)
  say "A: ${#layer_blobs[@]} layers; the uncompressed tars and their zstd -3 recompressions"
  mkdir -p "$in/tars" && chown "$user" "$in/tars"
  local i=0 b
  for b in "${layer_blobs[@]}"; do
    i=$((i + 1))
    run_user bash -c "gzip -dc $b > $in/tars/$i.tar && zstd -q -3 -T0 $in/tars/$i.tar -o $in/tars/$i.tar.zst"
    layer_tars+=("$in/tars/$i.tar")
    layer_zsts+=("$in/tars/$i.tar.zst")
  done
  # What a correct tree holds: whiteouts applied (imgbuild, umoci), or not (tar).
  /usr/bin/python3 "$here/layers-tree.py" expect "$in/applied.list" "$in/raw.list" "${layer_tars[@]}"
  say "A: expected trees: $(wc -l < "$in/applied.list") entries (whiteouts applied), $(wc -l < "$in/raw.list") (tar); dev/ left out"
  {
    printf 'unpack_image\t%s\t%s layers, %s MiB gzip, %s MiB tar, %s MiB zstd -3\n' "$ref" "${#layer_blobs[@]}" \
      "$(du -cm "${layer_blobs[@]}" | tail -n1 | cut -f1)" "$(du -cm "${layer_tars[@]}" | tail -n1 | cut -f1)" \
      "$(du -cm "${layer_zsts[@]}" | tail -n1 | cut -f1)"
  } >> "$out/meta.tsv"
  # From here on nothing timed may use the network: the registry goes away.
  bash "$top/tests/lib/registry.sh" stop "$regdir"
  say "A: registry stopped; the timed runs unpack from local blobs only"
}

# --- 3. inputs of part B (untimed) ---------------------------------------------
prepare_write() {
  local tarball=$cache/bookworm-minbase.tar
  [ -s "$tarball" ] || tarball=/var/tmp/imgbuild-tests/bookworm-minbase.tar
  if [ ! -s "$tarball" ]; then
    tarball=$cache/bookworm-minbase.tar
    say "B: mmdebstrap bookworm minbase (once, needs Debian's mirror)"
    mmdebstrap --quiet --variant=minbase --format=tar bookworm "$tarball.tmp" "${IMGBUILD_MIRROR:-http://deb.debian.org/debian}" >&2
    mv "$tarball.tmp" "$tarball"
  fi
  say "B: the minbase tree from $tarball on $fs (owned by $user)"
  run_user mkdir -p "$in/ctx/tree"
  run_user tar -x --exclude='./dev/*' -C "$in/ctx/tree" -f "$tarball"
  run_user /usr/bin/python3 "$treepy" list "$in/ctx/tree" "$in/tree.list"
  printf 'FROM scratch\nCOPY tree/ /\nOUTPUT type=oci,dest=out/,name=layer:bench\n' > "$in/ctx/layer.recipe"
  chown "$user" "$in/ctx/layer.recipe"
  printf 'write_tree\t%s entries, %s MiB (du), from %s\n' "$(wc -l < "$in/tree.list")" \
    "$(du -sm "$in/ctx/tree" | cut -f1)" "$tarball" >> "$out/meta.tsv"
}

# --- 4. runs ---------------------------------------------------------------------
B="buildah --root $w/root --runroot $w/runroot --storage-driver vfs"
# setup_of PART TOOL: untimed shell command run before the timed one (as the user).
setup_of() {
  case $1:$2 in
  unpack:imgbuild) echo "cp -a $in/store $w/store" ;;
  unpack:imgbuild-zstd) echo "cp -a $in/store-zstd $w/store" ;;
  write:buildah-*) echo "$B from -q --name bench scratch >/dev/null && /usr/bin/time -f %e -o $w/copy.time $B copy -q bench $in/ctx/tree / >/dev/null" ;;
  *) echo true ;;
  esac
}
# command_of PART TOOL: the timed shell command (as the user).
stamp='while IFS= read -r l; do printf "%s %s\n" "$EPOCHREALTIME" "$l"; done'
command_of() {
  local t=$2 comp=""
  case $1:$t in
  unpack:imgbuild)
    echo "$imgbuild --store $w/store -q unpack $ref $w/rootfs" ;;
  unpack:imgbuild-zstd)
    echo "$imgbuild --store $w/store -q unpack $zref $w/rootfs" ;;
  unpack:umoci)
    echo "umoci unpack --rootless --image $in/layout:bench $w/bundle" ;;
  unpack:tar-gzip|unpack:tar-pigz)
    echo "$tarl unpack $w/rootfs ${t#tar-} ${layer_blobs[*]}" ;;
  unpack:tar-zstd)
    echo "$tarl unpack $w/rootfs zstd ${layer_zsts[*]}" ;;
  unpack:tar-none)
    echo "$tarl unpack $w/rootfs none ${layer_tars[*]}" ;;
  write:imgbuild*)
    # imgbuild's info lines, stamped as they come: the COPY step's time.
    comp=${t#imgbuild}; comp=${comp#-}
    [ -n "$imgbuild_comps" ] && comp="--compression ${comp:-gzip}" || comp=""
    echo "set -o pipefail; cd $w && $imgbuild --store $w/store build $in/ctx/layer.recipe${comp:+ $comp} 2>&1 | $stamp > $w/stamps" ;;
  write:tar-*)
    echo "$tarl write $in/ctx/tree $w/layer ${t#tar-} $w" ;;
  write:buildah-none)
    echo "$B commit -q --format oci bench oci:$w/out:bench" ;;
  write:buildah-gzip)
    echo "$B commit -q --disable-compression=false --format oci bench oci:$w/out:bench" ;;
  write:buildah-zstd)
    # buildah 1.28's commit compresses with gzip or not at all; zstd only on push.
    echo "$B commit -q --format oci bench bench-img >/dev/null && $B push -q --compression-format zstd bench-img oci:$w/out:bench" ;;
  esac
}
# check_layout DIR: the OCI layout DIR is readable by skopeo and holds one
# layer whose digest is right and whose entries are the tree's.
check_layout() {
  local d=$1 info mt dg
  run_user skopeo inspect "oci:$d" >/dev/null || { echo "skopeo inspect oci:$d failed"; return 1; }
  info=$(run_user skopeo inspect --raw "oci:$d" | /usr/bin/python3 -c 'import json,sys; m=json.load(sys.stdin); assert len(m["layers"])==1, "layers: %d" % len(m["layers"]); print(m["layers"][0]["mediaType"], m["layers"][0]["digest"])') || return 1
  read -r mt dg <<<"$info"
  check_blob "$d/blobs/sha256/${dg#sha256:}" "${dg#sha256:}" "$mt"
}
# check_blob FILE SHA256 MEDIATYPE-OR-COMPRESSION: digest and entries.
check_blob() {
  local f=$1 want=$2 how=$3 got
  got=$(sha256sum "$f" | cut -d' ' -f1)
  [ "$got" = "$want" ] || { echo "digest: $got, expected $want"; return 1; }
  case $how in
  *gzip|pigz) gzip -dc "$f" ;;
  *zstd) zstd -dc "$f" ;;
  *) cat "$f" ;;
  esac | /usr/bin/python3 "$here/layers-tree.py" layer-check "$in/tree.list"
}
# verify PART TOOL: the run's output is complete; prints why not.
verify() {
  case $1:$2 in
  unpack:imgbuild*|unpack:tar-*) /usr/bin/python3 "$here/layers-tree.py" check "$w/rootfs" \
      "$in/$([[ $2 == tar-* ]] && echo raw || echo applied).list" ;;
  unpack:umoci) /usr/bin/python3 "$here/layers-tree.py" check "$w/bundle/rootfs" "$in/applied.list" ;;
  write:tar-*) check_blob "$w/layer" "$(cut -d' ' -f1 "$w/digest")" "${2#tar-}" ;;
  write:*) check_layout "$w/out" ;;
  esac
}
# extra PART TOOL LABEL: rows derived from one run (written to raw.tsv).
extra() {
  local p=$1 t=$2 label=$3 s
  case $p:$t in
  write:imgbuild*)
    # From the "[stage] COPY" line to the "  layer sha256:" line: the copy
    # into the stage's rootfs, the scan and the layer written and hashed.
    s=$(awk '/\] COPY / && !a {a=$1} /^[0-9.]+   layer sha256:/ && !b {b=$1} END {if (a && b) printf "%.2f", b - a}' "$w/stamps")
    [ -n "$s" ] && printf '%s\t%s\t%s\t%s\t%s\t0\tok\n' "$t: COPY step" "$p" "$fs" "$label" "$s" >> "$out/raw.tsv"
    # The layer alone (scan, tar, hash, compress, write, commit to the
    # store), as imgbuild measures it: "layer sha256:.. written in 0.52 s".
    s=$(sed -n 's/.*  layer sha256:.* written in \([0-9.]*\) s$/\1/p' "$w/stamps" | head -n1)
    [ -n "$s" ] && printf '%s\t%s\t%s\t%s\t%s\t0\tok\n' "$t: layer write" "$p" "$fs" "$label" "$s" >> "$out/raw.tsv"
    true ;;
  write:buildah-*)
    s=$(tail -n1 "$w/copy.time")
    printf '%s\t%s\t%s\t%s\t%s\t0\tok\n' "buildah copy (setup, not in commit)" "$p" "$fs" "$label" "$s" >> "$out/raw.tsv" ;;
  esac
  return 0
}
# one PART TOOL LABEL: one run; appends to raw.tsv unless LABEL is "warm-up";
# prints the wall seconds on stdout.
one() {
  local p=$1 t=$2 label=$3
  wipe "$w" "$uhome/.local/share/containers"
  mkdir -p "$w" && chown "$user" "$w"
  rm -f "$base/time" "$base/log"
  local setup cmd; setup=$(setup_of "$p" "$t"); cmd=$(command_of "$p" "$t")
  printf '%s\t%s\t%s\n' "$t" "$p" "$cmd" >> "$out/commands.raw"
  [ "$setup" = true ] || printf '%s\t%s\t%s\n' "$t (setup)" "$p" "$setup" >> "$out/commands.raw"
  local rc=0 status=ok wall=0 rss=0 why=""
  run_user bash -c "$setup" >"$base/log" 2>&1 || { rc=$?; why="setup failed: $(tail -n 3 "$base/log" | tr '\n' ' ')"; }
  if [ $rc -eq 0 ]; then
    run_user /usr/bin/time -f '%e %M' -o "$base/time" bash -c "$cmd" >"$base/log" 2>&1 || rc=$?
    end_pause "$xdg"
    [ -s "$base/time" ] && read -r wall rss < <(tail -n 1 "$base/time")
    [ $rc -eq 0 ] || why="exit $rc: $(tail -n 3 "$base/log" | tr '\n' ' ')"
  fi
  if [ $rc -eq 0 ] && ! why=$(verify "$p" "$t" 2>&1); then rc=1; fi
  [ $rc -eq 0 ] || { status=failed; say "$t $p: FAILED: $why"; }
  if [ "$label" != warm-up ]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$p" "$fs" "$label" "$wall" "$rss" "$status" >> "$out/raw.tsv"
    [ $status = ok ] && extra "$p" "$t" "$label"
  fi
  say "$(printf '%-7s %-6s %-14s %7.2f s %6d MiB %s  %s' "$label" "$p" "$t" "$wall" $((rss / 1024)) "$status" "${why%%$'\n'*}")"
  wipe "$w"
  echo "$wall"
  [ $status = ok ]
}

printf 'tool\timage\tfs\trun\twall_s\tpeak_rss_kib\tstatus\n' > "$out/raw.tsv"
: > "$out/commands.raw"
{
  echo "date	$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu	$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
  echo "memory	$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "kernel	$(uname -sr)"
  echo "loadavg_start	$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "imgbuild	$("$imgbuild" version) ($(git -C "$top" describe --always --dirty 2>/dev/null || echo '?')), build --compression: ${imgbuild_comps:-not supported (gzip only)}"
  echo "skopeo	$(skopeo --version)"
  echo "umoci	$(umoci --version)"
  echo "buildah	$(buildah --version)"
  echo "gzip	$(gzip --version | head -n1)"
  echo "pigz	$(pigz --version 2>&1)"
  echo "zstd	$(zstd --version)"
  echo "tar	$(tar --version | head -n1)"
  echo "fs	$fs	$(df -T "$fs" | awk 'NR==2 {print $2}')"
  echo "rounds	$runs (tools whose warm-up took over $slow_s s: $runs_slow)$([ "$quick" = 1 ] && echo ', --quick: no warm-up')"
  echo "ratio_same_compression	1"
} > "$out/meta.tsv"

start=$(date +%s)
for p in $parts; do
  if [ "$p" = unpack ]; then tl=$unpack_tools; prepare_unpack; else tl=$write_tools; prepare_write; fi
  [ -n "${tl// /}" ] || continue
  declare -A n_of=()
  for t in $tl; do
    n_of[$t]=$runs
    if [ "$quick" = 0 ]; then
      s=$(one "$p" "$t" warm-up) || die "$t does not work here (see above)"
      if [ "${s%.*}" -ge $slow_s ] && [ "$runs_slow" -lt "$runs" ]; then n_of[$t]=$runs_slow; fi
    fi
  done
  # Rounds: each runs every tool once, in turn (load from elsewhere spreads alike).
  for i in $(seq 1 "$runs"); do
    for t in $tl; do
      [ "$i" -le "${n_of[$t]}" ] || continue
      one "$p" "$t" "$i/${n_of[$t]}" >/dev/null || true
    done
  done
  wipe "$in"; mkdir -p "$in" && chown "$user" "$in"
done
echo "loadavg_end	$(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/meta.tsv"
echo "total_s	$(( $(date +%s) - start ))" >> "$out/meta.tsv"
/usr/bin/python3 - "$out" "$w" "$in" <<'PY'
import sys
out, w, inp = sys.argv[1:4]
seen = {}
for line in open(out + "/commands.raw"):
    tool, p, cmd = line.rstrip("\n").split("\t", 2)
    seen[(tool, p)] = cmd.replace(w, "W").replace(inp, "IN")
with open(out + "/commands.tsv", "w") as f:
    for (tool, p), cmd in seen.items():
        f.write(f"{tool}\t{p}\t{cmd}\n")
PY
rm -f "$out/commands.raw"
cp "$here/layers-notes.md" "$out/notes.md"

# --- 5. report -----------------------------------------------------------------
/usr/bin/python3 "$here/report.py" "$out" | tee "$out/table.md"
say "results in $out"
