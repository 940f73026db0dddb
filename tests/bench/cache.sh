#!/usr/bin/env bash
# Build cache: imgbuild beside buildah bud --layers, podman build and
# ch-image build, in one run, every store on tmpfs, every tool run as an
# unprivileged user.
#
#   sudo bash tests/bench/install-deps.sh     # once: the peers and tools
#   make                                      # bin/imgbuild
#   sudo bash tests/bench/cache.sh            # about 10 minutes on 2 cores
#   sudo bash tests/bench/cache.sh --rounds 1 # a quick look
#
# Two recipes (tests/bench/wheel.recipe, tests/bench/ten.recipe), the same
# files for every tool, on the Debian bookworm minbase image from a local
# registry (tests/lib/base-image.sh):
#   wheel  a small two-stage wheel build: a C toolchain (gcc, python3-dev,
#          setuptools, wheel: 69 .debs, 68 MB) installed with apt-get from a
#          local apt cache bind-mounted from the context, a C-extension
#          wheel built (tests/bench/cache-ext), copied to /opt in a second
#          stage;
#   ten    10 steps after FROM (ENV, WORKDIR, 3 RUN, COPY, LABEL, USER,
#          EXPOSE, CMD).
# Per tool, recipe and round, in a fresh store that holds only the pulled
# base image (pull untimed; as podman's and buildah's pulls store the
# layers unpacked, imgbuild's is `pull --unpack`, which keeps the base's
# tree as a snapshot; BENCH_IMGBUILD_PULL=pull for the blobs alone):
#   cold   the first build;
#   noop   a rebuild without changes (median of --noop-runs runs);
#   edit   (wheel) a rebuild after a change to the extension's source: the
#          toolchain step must come from the cache, the wheel be rebuilt;
#   edit2  (wheel) a second such change and rebuild (the edit-build loop).
# Disk use (round 1 only; --cycles 0 leaves it out), of imgbuild's store
# and buildah's and podman's storage (du -s of the directory, disk blocks,
# hard links once), for both recipes after the cold build and, for wheel,
# after --cycles edit-rebuild cycles (edit and edit2 included), then after
# each tool's own cleanup of what no image needs (imgbuild prune; buildah
# rmi --prune; podman image prune -f); then imgbuild again: the same
# number of cycles with `prune --keep-storage BUDGET` after each (BUDGET:
# the cold store's size), the largest size seen; and where imgbuild's
# bytes are (blobs/: compressed layers; snapshots/: unpacked trees).
# The lower bound `plain` runs wheel.recipe's steps by a script
# (tests/bench/plain-wheel.sh) in `unshare --map-root-user --map-auto`
# + chroot: tar -x of the base, apt-get install of the same .debs, the
# wheel build, tar -x and copy for the second stage; no layer, snapshot or
# cache. buildah and podman use the overlay driver (native rootless
# overlay on tmpfs; fuse-overlayfs is not usable by the user here) with
# --isolation chroot (crun fails on this machine's cgroup setup).
# ch-image (charliecloud 0.31) pulls from an HTTPS twin of the registry
# (tests/bench/tls-registry.sh, --tls-no-verify), builds with --force
# (its fakeroot workarounds for apt-get) and its git build cache, from
# variants of the recipes it can parse: no ARG in FROM (the base is
# written in), and no RUN --mount: the wheel recipe COPYs the .debs in and
# removes them in the apt-get step. Its CMD is ignored (unsupported).
#
# Options (or the environment variable after each):
#   --rounds N       rounds (BENCH_RUNS, default 3)
#   --noop-runs N    no-op rebuilds per round (BENCH_NOOP_RUNS, default 10)
#   --tools "T..."   a subset of: imgbuild buildah podman ch-image plain
#                    (BENCH_TOOLS)
#   --cycles N       edit-rebuild cycles for the disk use (BENCH_CYCLES,
#                    default 20; 0: no disk use figures)
# Other settings: IMGBUILD (binary, default bin/imgbuild), BENCH_FS (tmpfs,
# default /dev/shm), BENCH_USER (default imgbuild-bench), BENCH_OUT,
# IMGBUILD_BENCH_CACHE (default /var/tmp/imgbuild-bench: the .debs, the
# registry storage and the base tarball are kept there).
#
# Prints a Markdown table (median/min/max seconds per tool, recipe and
# phase, ratio of each peer to imgbuild) and keeps it with the raw numbers
# in $BENCH_OUT (default $IMGBUILD_BENCH_CACHE/results/cache-DATE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${IMGBUILD_BENCH_CACHE:-/var/tmp/imgbuild-bench}
imgbuild_src=${IMGBUILD:-$top/bin/imgbuild}
runs=${BENCH_RUNS:-3}
noop_runs=${BENCH_NOOP_RUNS:-10}
tools=${BENCH_TOOLS:-"imgbuild buildah podman ch-image plain"}
cycles=${BENCH_CYCLES:-20}
fs=${BENCH_FS:-/dev/shm}
out=${BENCH_OUT:-$cache/results/cache-$(date -u +%Y%m%dT%H%M%SZ)}
sys_path=/usr/sbin:/usr/bin:/sbin:/bin
export PATH=$sys_path

say() { echo "bench: $*" >&2; }
die() { say "$*"; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) runs=${2:?}; shift 2 ;;
  --noop-runs) noop_runs=${2:?}; shift 2 ;;
  --tools) tools=${2:?}; shift 2 ;;
  --cycles) cycles=${2:?}; shift 2 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
  *) die "unknown option $1" ;;
  esac
done
for c in buildah podman skopeo umoci mmdebstrap unshare runuser python3 git openssl; do
  command -v "$c" >/dev/null || die "missing $c: sudo bash tests/bench/install-deps.sh"
done
if [[ " $tools " == *" ch-image "* ]]; then
  command -v ch-image >/dev/null && /usr/bin/python3 -c 'import lark' 2>/dev/null \
    || die "missing ch-image (charliecloud-builders, python3-lark): sudo bash tests/bench/install-deps.sh"
fi
[ -x "$imgbuild_src" ] || die "no imgbuild binary at $imgbuild_src: run 'make'"
[ "$(id -u)" -eq 0 ] || die "run as root: the tools run as the unprivileged user \$BENCH_USER"

user=${BENCH_USER:-imgbuild-bench}
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
grep -q "^$user:" /etc/subuid || usermod --add-subuids 400000-465535 "$user"
grep -q "^$user:" /etc/subgid || usermod --add-subgids 400000-465535 "$user"
uhome=$(getent passwd "$user" | cut -d: -f6)

base=$fs/imgbuild-bench-cache
xdg=$base/xdg
regdir=$cache/registry-cache
mkdir -p "$cache/bin" "$out"
install -m 755 "$imgbuild_src" "$cache/bin/imgbuild-cache"
install -m 755 "$here/plain-wheel.sh" "$cache/bin/plain-wheel.sh"
imgbuild=$cache/bin/imgbuild-cache
chmod 755 "$cache" "$cache/bin"

as_user() {
  # (GIT_*: ch-image's build cache commits with git)
  (cd / && runuser -u "$user" -- env -i HOME="$uhome" USER="$user" LOGNAME="$user" \
     PATH="$sys_path" XDG_RUNTIME_DIR="$xdg" LANG=C.UTF-8 GIT_AUTHOR_NAME=bench \
     GIT_AUTHOR_EMAIL=bench@localhost GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@localhost "$@")
}
tlsdir=$cache/registry-tls
stop_all() {
  bash "$top/tests/lib/registry.sh" stop "$regdir" 2>/dev/null || true
  bash "$here/tls-registry.sh" stop "$tlsdir"
  rm -rf "$base"
}
trap stop_all EXIT
rm -rf "$base"
mkdir -p "$base" "$xdg" && chown "$user" "$base" "$xdg" && chmod 700 "$xdg"

# --- inputs (untimed) ---------------------------------------------------------
mkdir -p "$regdir"
bash "$top/tests/lib/registry.sh" stop "$regdir" 2>/dev/null || true
port=$(bash "$top/tests/lib/registry.sh" start "$regdir")
ref=$(IMGBUILD_TEST_CACHE=$cache bash "$top/tests/lib/base-image.sh" "127.0.0.1:$port")
tref=
if [[ " $tools " == *" ch-image "* ]]; then
  tlsport=$(bash "$here/tls-registry.sh" start "$regdir" "$tlsdir") || die "HTTPS registry did not start"
  tref=127.0.0.1:$tlsport/${ref#*/}
fi
base_tar=$cache/bookworm-minbase.tar
debs=$cache/debs
if [ -z "$(ls "$debs"/*.deb 2>/dev/null)" ]; then
  say "downloading the toolchain's .debs once (Debian mirror) into $debs"
  mkdir -p "$debs.tmp" && chown "$user" "$debs.tmp"
  as_user "$imgbuild" --store "$base/dl-store" -q run -v "$debs.tmp:/var/cache/apt/archives" "$ref" -- \
    sh -c 'apt-get update -qq && apt-get install -y -qq --download-only --no-install-recommends gcc libc6-dev python3-dev python3-setuptools python3-wheel >/dev/null'
  rm -rf "$debs" && mkdir -p "$debs" && mv "$debs.tmp"/*.deb "$debs/" && rm -rf "$debs.tmp"
fi
ctx=$base/ctx
mkdir -p "$ctx/debs"
cp -r "$here/cache-ext" "$ctx/ext"
cp "$debs"/*.deb "$ctx/debs/"
cp "$here/wheel.recipe" "$here/ten.recipe" "$ctx/"
# ch-image's variants (see above): the base written in, the .debs copied in
for r in wheel ten; do
  sed -e '/^ARG BASE$/d' -e "s|\${BASE}|$tref|" \
      -e 's|^RUN --mount=type=bind,source=debs,target=/debs \(.*\)$|COPY debs/ /debs/\nRUN \1 \&\& rm -rf /debs|' \
      "$here/$r.recipe" > "$ctx/$r-ch.recipe"
done
# Context files older than the run: imgbuild's digest memo (like buildah's
# and podman's own caches) only keeps files unchanged for 2 s.
find "$ctx" -exec touch -h -d '1 minute ago' {} +
chown -R "$user" "$ctx"
ndebs=$(ls "$ctx/debs" | wc -l)
say "base $ref; $ndebs .debs ($(du -sh "$ctx/debs" | cut -f1)); results in $out"

raw=$out/raw.tsv
: > "$raw"
now() { date +%s.%N; }
record() { # tool recipe phase seconds
  printf '%s\t%s\t%s\t%s\n' "$@" >> "$raw"
  say "$(printf '%-9s %-6s %-5s %8.3f s' "$@")"
}
# timed TOOL RECIPE PHASE CMD...: runs CMD as the user, records its wall time.
timed() {
  local t=$1 r=$2 p=$3; shift 3
  local t0 t1
  t0=$(now)
  if ! as_user "$@" > "$out/last.log" 2>&1; then
    cat "$out/last.log" >&2
    die "$t $r $p failed"
  fi
  t1=$(now)
  record "$t" "$r" "$p" "$(python3 -c "print(f'{$t1 - $t0:.4f}')")"
}

edit_source() { # a real change to the C source, so the wheel must be rebuilt
  echo "/* edit $(date +%s%N) */" >> "$ctx/ext/benchext.c"
  touch -d '1 minute ago' "$ctx/ext/benchext.c"
}
reset_source() {
  cp "$here/cache-ext/benchext.c" "$ctx/ext/benchext.c"
  touch -d '1 minute ago' "$ctx/ext/benchext.c"
  chown "$user" "$ctx/ext/benchext.c"
}

storage=$out/storage.tsv
: > "$storage"
# disk TOOL RECIPE POINT DIR: its disk use in bytes, recorded
disk() {
  local b
  b=$(du -s -B1 "$4" | cut -f1)
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$b" >> "$storage"
  say "$(printf '%-9s %-6s %-14s %8.1f MB' "$1" "$2" "$3" "$(python3 -c "print($b / 1e6)")")"
}
store_dir() { # TOOL WORKDIR: where its images and cache live
  case $1 in imgbuild) echo "$2/store" ;; buildah|podman) echo "$2/root" ;; *) echo "" ;; esac
}

bargs=(--build-arg "BASE=$ref")
for round in $(seq 1 "$runs"); do
  for tool in $tools; do
    for recipe in wheel ten; do
      [ "$tool" = plain ] && [ "$recipe" = ten ] && continue
      reset_source
      w=$base/w-$tool-$recipe
      rm -rf "$w" && mkdir -p "$w" && chown "$user" "$w"
      case $tool in
      imgbuild)
        cmd=("$imgbuild" -q --store "$w/store" build "$ctx/$recipe.recipe" "${bargs[@]}" -t "bench-$recipe:1")
        # --unpack: the base's tree kept, as podman's and buildah's pulls
        # keep theirs (BENCH_IMGBUILD_PULL="pull" for blobs only)
        as_user "$imgbuild" -q --store "$w/store" ${BENCH_IMGBUILD_PULL:-pull --unpack} "$ref" >/dev/null ;;
      buildah|podman)
        # podman refuses a runroot path of more than 50 characters
        rr=$base/rr-$tool && rm -rf "$rr" && mkdir -p "$rr" && chown "$user" "$rr"
        st=(--root "$w/root" --runroot "$rr" --storage-driver overlay)
        if [ "$tool" = buildah ]; then
          cmd=(buildah "${st[@]}" bud -q --layers --isolation chroot --tls-verify=false "${bargs[@]}"
               -t "bench-$recipe:1" -f "$ctx/$recipe.recipe" "$ctx")
        else
          cmd=(podman "${st[@]}" build -q --layers --isolation chroot --tls-verify=false "${bargs[@]}"
               -t "bench-$recipe:1" -f "$ctx/$recipe.recipe" "$ctx")
        fi
        as_user "$tool" "${st[@]}" pull -q --tls-verify=false "$ref" >/dev/null ;;
      ch-image)
        cmd=(ch-image -s "$w/storage" --tls-no-verify build --force -t "bench-$recipe"
             -f "$ctx/$recipe-ch.recipe" "$ctx")
        as_user ch-image -s "$w/storage" --tls-no-verify pull "$tref" >/dev/null ;;
      plain)
        cmd=(unshare --map-root-user --map-auto --mount --pid --fork -- "$cache/bin/plain-wheel.sh"
             "$base_tar" "$ctx" "$w/tree") ;;
      esac
      timed "$tool" "$recipe" cold "${cmd[@]}"
      sd=$(store_dir "$tool" "$w")
      measure=
      [ "$round" = 1 ] && [ "$cycles" -gt 0 ] && [ -n "$sd" ] && measure=1
      [ -n "$measure" ] && disk "$tool" "$recipe" cold "$sd"
      if [ "$tool" = plain ]; then
        [ -n "$(ls "$w"/tree/client/opt/*.whl 2>/dev/null)" ] || die "plain: no wheel under /opt"
        as_user unshare --map-root-user --map-auto rm -rf "$w"
        continue
      fi
      for i in $(seq 1 "$noop_runs"); do timed "$tool" "$recipe" noop "${cmd[@]}"; done
      if [ "$recipe" = wheel ]; then
        edit_source
        timed "$tool" "$recipe" edit "${cmd[@]}"
        edit_source
        timed "$tool" "$recipe" edit2 "${cmd[@]}"
        if [ -n "$measure" ]; then
          for i in $(seq 3 "$cycles"); do
            edit_source
            as_user "${cmd[@]}" >/dev/null 2>&1 || die "$tool: edit cycle $i failed"
          done
          disk "$tool" "$recipe" "edits" "$sd"
          case $tool in
          imgbuild) as_user "$imgbuild" -q --store "$w/store" prune >/dev/null ;;
          buildah) as_user buildah --root "$w/root" --runroot "$base/rr-$tool" \
                     --storage-driver overlay rmi --prune >/dev/null 2>&1 || true ;;
          podman) as_user podman --root "$w/root" --runroot "$base/rr-$tool" \
                    --storage-driver overlay image prune -f >/dev/null 2>&1 || true ;;
          esac
          disk "$tool" "$recipe" "pruned" "$sd"
          if [ "$tool" = imgbuild ]; then
            disk imgbuild wheel "pruned: blobs/" "$sd/blobs"
            disk imgbuild wheel "pruned: snapshots/" "$sd/snapshots"
          fi
          if [ "$tool" = imgbuild ]; then
            cold_b=$(awk -F'\t' '$1 == "imgbuild" && $2 == "wheel" && $3 == "cold" { print $4 }' "$storage")
            budget=$cold_b
            most=0
            for i in $(seq 1 "$cycles"); do
              edit_source
              as_user "${cmd[@]}" >/dev/null 2>&1 || die "imgbuild: budget cycle $i failed"
              as_user "$imgbuild" -q --store "$w/store" prune --keep-storage "$budget" >/dev/null
              b=$(du -s -B1 "$sd" | cut -f1)
              [ "$b" -gt "$most" ] && most=$b
            done
            printf '%s\t%s\t%s\t%s\n' imgbuild wheel "budget $budget" "$most" >> "$storage"
            say "imgbuild: $cycles more cycles, prune --keep-storage $budget after each: at most $most bytes"
          fi
        fi
      fi
      # every output checked: the wheel is in the client image under /opt
      case $tool in
      imgbuild) chk=$(as_user "$imgbuild" -q --store "$w/store" run "bench-$recipe:1" -- ls /opt /app 2>/dev/null || true) ;;
      ch-image) chk=$(ls "$w/storage/img/bench-$recipe/opt" "$w/storage/img/bench-$recipe/app" 2>/dev/null || true) ;;
      *) B=(buildah --root "$w/root" --runroot "$base/rr-$tool" --storage-driver overlay)
         c=$(as_user "${B[@]}" from -q "bench-$recipe:1" 2>/dev/null || true)
         chk=$(as_user "${B[@]}" run --isolation chroot "$c" ls /opt /app 2>/dev/null || true) ;;
      esac
      case $recipe in
      wheel) [[ "$chk" == *benchext-1.0-cp311-cp311-linux_x86_64.whl* ]] || say "warning: $tool: no wheel found under /opt of bench-wheel:1 ($chk)" ;;
      esac
      as_user "$imgbuild" --store "$w/store" -q prune --all >/dev/null 2>&1 || true
      as_user podman unshare rm -rf "$w" 2>/dev/null || true
      rm -rf "$w" "$base/rr-$tool"
    done
  done
done

{
  echo "# cache.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "Machine: $(nproc) CPUs, $(uname -r), stores on $fs; rounds $runs, no-op runs $noop_runs per round."
  echo "Versions: imgbuild $("$imgbuild" version | cut -d' ' -f2), $(buildah --version | cut -d' ' -f1-3), $(podman --version), ch-image $(USER=$user ch-image --version 2>&1 || echo none)."
  echo
  python3 - "$raw" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    t, r, p, s = line.rstrip("\n").split("\t")
    rows[(t, r, p)].append(float(s))
med = {k: statistics.median(v) for k, v in rows.items()}
print("| tool | recipe | phase | median s | min s | max s | n | ratio to imgbuild |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
order = {"imgbuild": 0, "buildah": 1, "podman": 2, "ch-image": 3, "plain": 4}
for (t, r, p) in sorted(rows, key=lambda k: (k[1], ["cold", "noop", "edit", "edit2"].index(k[2]), order.get(k[0], 9))):
    v = rows[(t, r, p)]
    base = med.get(("imgbuild", r, p))
    ratio = f"{med[(t, r, p)] / base:.2f}x" if base else ""
    print(f"| {t} | {r} | {p} | {med[(t, r, p)]:.3f} | {min(v):.3f} | {max(v):.3f} | {len(v)} | {ratio} |")
EOF
  if [ -s "$storage" ]; then
    echo
    echo "Disk use (MB; after $cycles edit-rebuild cycles of wheel, then each tool's cleanup):"
    echo
    python3 - "$storage" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
print("| tool | recipe | point | MB |")
print("| --- | --- | --- | ---: |")
for t, r, p, b in rows:
    print(f"| {t} | {r} | {p} | {int(b) / 1e6:.1f} |")
EOF
  fi
} | tee "$out/report.md"
