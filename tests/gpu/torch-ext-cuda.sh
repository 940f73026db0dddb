#!/usr/bin/env bash
# tests/gpu/torch-ext-cuda.sh — the CUDA extension of recipes/torch-cuda-ext
# (ibtorch_ext: scaled_add, row_softmax) built, repaired, installed and
# checked on a real GPU, on a machine with an NVIDIA GPU and driver, nvcc
# and a CUDA build of torch (not part of `make test`: CI has no GPU;
# docs/gpu.md, "The CUDA extension on a GPU").  Needs no network.
#
# For each identity (root; an unprivileged user it creates, in the single-id
# mode, IMGBUILD_USERNS=single), in `imgbuild run --device nvidia.com/gpu=all`
# on a host-root skeleton (the host's /usr, /etc and /opt bound read-only,
# a work directory bound read-write):
#   1. `pip wheel --no-deps --no-build-isolation --no-index` of the
#      extension's source with WITH_CUDA=1 (CMake, nvcc) against the host's
#      torch;
#   2. on the host: `imgbuild wheel audit` and `imgbuild wheel repair` to the
#      host glibc's manylinux policy, with the recipe's REPAIR_EXCLUDE (torch's
#      libraries, libcudart) kept out: nothing may be grafted;
#   3. `pip install --no-deps --target` of the repaired wheel into a scratch
#      directory;
#   4. tests/gpu/torch-ext-check.py: both operators on CUDA tensors against
#      torch's own (contiguous, transposed, strided; odd widths 33, 129, ...),
#      their errors; a scripted function and module calling
#      torch.ops.ibtorch_ext.* saved with torch.jit.save and, in a fresh
#      process, loaded back: equal results.
#
#   bash tests/gpu/torch-ext-cuda.sh           # as root, from anywhere
#   bash tests/gpu/torch-ext-cuda.sh --cpu     # the dry run (TORCH_EXT_GPU_DRYRUN=1)
#
# The dry run needs no GPU: WITH_CUDA=0, no --device, the same checks on
# CPU tensors (e.g. TORCH_PY=/usr/bin/python3 with Debian's python3-torch,
# libtorch-dev, cmake, g++, python3-pip).
#
# Environment (defaults in brackets):
#   TORCH_PY              the torch Python [/opt/torch/.venv/bin/python3]
#   TORCH_CUDA_ARCH_LIST  GPU architectures [GPU 0's compute capability, e.g. 9.0]
#   CUDAARCHS             CMake's CUDA architectures [from TORCH_CUDA_ARCH_LIST]
#   CUDA_HOME             the CUDA toolkit [nvcc's: PATH, CUDA_HOME, /usr/local/cuda*]
#   MAX_JOBS              parallel compile jobs [nproc]
#   REPAIR_PLAT           the repair's policy [manylinux_2_<host glibc>_<arch>]
#   TORCH_EXT_IDENTITIES  "root user" [both]; TORCH_EXT_USER the user [gpuuser]
#   TORCH_EXT_PIP         auto: the torch Python's pip, else the host's with
#                         --python, else setup.py bdist_wheel; host; none [auto]
#   BUILD_TIMEOUT, RUN_TIMEOUT  seconds per build / per other step [600, 300]
#   IMGBUILD              the binary [bin/imgbuild]
#   GPU_CARRY             a directory of shared libraries bin/imgbuild needs
#                         (those the host lacks are used, through
#                         LD_LIBRARY_PATH, by imgbuild alone) and of a
#                         `patchelf` when the host has none [./gpu-carry;
#                         tests/gpu/make-carry.sh fills it]
#   LOG_DIR               copy the build logs and wheels there [none]
#   KEEP_WORK=1           keep the work directory (/tmp/ib-torchext.*)
# Runs as root; exit status 0 when every check passed, 1 otherwise.
# (shellcheck: the steps are functions that `check` runs)
# shellcheck disable=SC2317
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
top=$PWD
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin # ldconfig, runuser, useradd
dry=${TORCH_EXT_GPU_DRYRUN:-0}
for a in "$@"; do
  case $a in
    --cpu) dry=1 ;;
    -h | --help) sed -n '2,/^# Runs as root/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "torch-ext-cuda.sh: unknown argument $a (--cpu, --help)" >&2; exit 2 ;;
  esac
done
[ "$dry" = 1 ] || dry=0
ib=${IMGBUILD:-$top/bin/imgbuild}
carry=${GPU_CARRY:-$top/gpu-carry}
py=${TORCH_PY:-/opt/torch/.venv/bin/python3}
jobs=${MAX_JOBS:-$(nproc)}
identities=${TORCH_EXT_IDENTITIES:-root user}
user=${TORCH_EXT_USER:-gpuuser}
build_timeout=${BUILD_TIMEOUT:-600}
run_timeout=${RUN_TIMEOUT:-300}
recipe=$top/recipes/torch-cuda-ext.recipe
if [ "$dry" = 1 ]; then mode="CPU dry run"; dev=cpu; with_cuda=0; else mode="GPU"; dev=cuda; with_cuda=1; fi

results=()
fail=0
t_start=$SECONDS
step() { echo; echo "== $*"; }
record() { results+=("$(printf '%-4s  %s' "$1" "$2")"); [ "$1" = PASS ] || [ "$1" = SKIP ] || fail=1; }
# check NAME CMD...: run it, say ok/FAILED with its time, record the result
check() {
  local name=$1 t0=$SECONDS rc
  shift
  "$@"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "-> ok ($((SECONDS - t0)) s)"; record PASS "$name"
  else
    if [ "$rc" -eq 124 ]; then echo "-> FAILED: timed out after $((SECONDS - t0)) s"; else echo "-> FAILED (exit $rc, $((SECONDS - t0)) s)"; fi
    record FAIL "$name"
  fi
  return "$rc"
}
summary() {
  echo
  echo "== summary: $mode, $((SECONDS - t_start)) s"
  printf '%s\n' "${results[@]}"
  echo
  if [ $fail -eq 0 ]; then echo "torch extension ($mode): all passed"; else echo "torch extension ($mode): some FAILED"; fi
}
finish() {
  summary
  if [ -n "${work:-}" ]; then
    if [ -n "${LOG_DIR:-}" ]; then
      mkdir -p "$LOG_DIR" && (cd "$work" && find . -maxdepth 3 \( -name '*.log' -o -name '*.whl' -o -name '*.json' \) \
        -not -path './*-rootfs/*' -not -path './*/store/*' -exec cp --parents {} "$LOG_DIR/" \;)
    fi
    if [ "${KEEP_WORK:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
  fi
  exit $fail
}

# ---------------------------------------------------------------------------
step "host, tools and versions ($mode)"
missing=()
miss() { missing+=("$1"); echo "MISSING: $1"; }
date -u
echo "kernel $(uname -r); $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}"); $(getconf GNU_LIBC_VERSION); $(nproc) CPUs"
[ "$(id -u)" -eq 0 ] || { echo "torch-ext-cuda.sh: run it as root (it creates the unprivileged user $user)" >&2; exit 2; }
arch=$(uname -m)
glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
plat=${REPAIR_PLAT:-manylinux_${glibc//./_}_$arch}
# the recipe's REPAIR_EXCLUDE, one --exclude each
excl=$(sed -n 's/^ARG REPAIR_EXCLUDE="\(.*\)"$/\1/p' "$recipe")
[ -n "$excl" ] || miss "ARG REPAIR_EXCLUDE in $recipe"
excludes=()
IFS=: read -ra pats <<<"$excl"
for p in "${pats[@]}"; do excludes+=(--exclude "$p"); done

work=$(mktemp -d /tmp/ib-torchext.XXXXXX)
chmod 755 "$work"
trap 'echo "interrupted"; fail=1; finish' INT TERM

# imgbuild, and the libraries of GPU_CARRY that this host lacks (for
# imgbuild and patchelf only: nothing else on the host, nor the sandbox,
# sees them)
mkdir -p "$work/lib"
if [ -d "$carry" ]; then
  known=$(ldconfig -p | awk 'NR > 1 { print $1 }')
  for f in "$carry"/*.so*; do
    [ -f "$f" ] || continue
    n=$(basename "$f")
    echo "$known" | grep -qxF "$n" || cp -L "$f" "$work/lib/$n"
  done
fi
carried=$(cd "$work/lib" && echo *)
[ "$carried" != "*" ] || carried=
ibenv=(env LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
if [ -x "$ib" ] && cp "$ib" "$work/imgbuild" && v=$("${ibenv[@]}" "$work/imgbuild" version 2>&1); then
  echo "$v (${ib})${carried:+; from $carry: $carried}"
else
  miss "a working imgbuild at $ib (\`make\`; shared libraries the host lacks go in GPU_CARRY=$carry): ${v:-not executable}"
  [ -x "$ib" ] && LD_LIBRARY_PATH="$work/lib" ldd "$ib" 2>&1 | grep 'not found'
fi

# patchelf, for the repair
pe=$(command -v patchelf || true)
[ -n "$pe" ] || { [ -x "$carry/patchelf" ] && pe=$carry/patchelf; }
if [ -n "$pe" ] && cp "$pe" "$work/patchelf" && v=$("${ibenv[@]}" "$work/patchelf" --version 2>&1); then
  echo "$v ($pe)"
else
  miss "patchelf (for imgbuild wheel repair): not in PATH nor $carry/patchelf"
fi

# the torch Python
pyprefix=; pybase=; torchfile=; torchcuda=
venvbin=$(dirname "$py")
if [ -x "$py" ] && tv=$("$py" -c '
import sys, torch
print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available(), sys.prefix, sys.base_prefix, torch.__file__)' 2>&1 | tail -1) \
   && [ "$(echo "$tv" | wc -w)" -eq 7 ]; then
  read -r pyver torchver torchcuda cudaok pyprefix pybase torchfile <<<"$tv"
  echo "Python $pyver ($py), torch $torchver, torch's CUDA $torchcuda, cuda available on the host: $cudaok ($torchfile)"
  if [ "$dry" = 0 ] && [ "$torchcuda" = None ]; then miss "a CUDA build of torch: $py has torch $torchver, a CPU build"; fi
else
  miss "torch for $py (TORCH_PY): ${tv:-no such Python}"
fi
if [ -x "$py" ]; then
  "$py" -c 'import setuptools' 2>/dev/null || miss "setuptools for $py (the extension's setup.py)"
  "$py" -c 'import setuptools.command.bdist_wheel' 2>/dev/null || "$py" -c 'import wheel' 2>/dev/null \
    || miss "bdist_wheel for $py (the 'wheel' package or setuptools >= 70.1)"
fi
# pip: the torch Python's own, else a host pip that can drive it (--python,
# pip >= 22.3), else none: setup.py bdist_wheel builds, the wheel is unzipped
# (TORCH_EXT_PIP=host or none picks one, to test them)
pipwhich=${TORCH_EXT_PIP:-auto}
if [ ! -x "$py" ]; then
  pip=()
elif [ "$pipwhich" = auto ] && v=$("$py" -m pip --version 2>/dev/null); then
  pip=("$py" -m pip); echo "$v"
elif [ "$pipwhich" != none ] && [ -x /usr/bin/python3 ] && v=$(/usr/bin/python3 -m pip --python "$py" --version 2>/dev/null); then
  pip=(/usr/bin/python3 -m pip --python "$py"); echo "$v (the host's pip, --python $py)"
else
  pip=(); echo "no pip for $py: the wheel is built with setup.py bdist_wheel and installed by unzipping it"
fi
build_how="pip wheel"; install_how="pip install --no-deps --target"
[ ${#pip[@]} -gt 0 ] || { build_how="setup.py bdist_wheel"; install_how="unzip into"; }

# cmake: the host's, else pip's cmake beside the torch Python
cm=$(command -v cmake || true)
[ -n "$cm" ] || { [ -x "$venvbin/cmake" ] && cm=$venvbin/cmake; }
if [ -n "$cm" ] && v=$("$cm" --version 2>&1 | head -1); then echo "$v ($cm)"
else miss "cmake: not in PATH ($PATH) nor $venvbin/cmake (install the host's cmake, or pip's cmake into the torch venv)"; fi
# a build tool for CMake's generator
mk=$(command -v make || true); gen=
if [ -n "$mk" ]; then echo "$("$mk" --version | head -1) ($mk)"
else
  mk=$(command -v ninja || true)
  [ -n "$mk" ] || { [ -x "$venvbin/ninja" ] && mk=$venvbin/ninja; }
  if [ -n "$mk" ]; then gen=Ninja; echo "ninja $("$mk" --version) ($mk; no make: CMAKE_GENERATOR=Ninja)"
  else miss "make or ninja (CMake's build tool)"; fi
fi
cxx=$(command -v c++ || command -v g++ || true)
if [ -n "$cxx" ]; then echo "$("$cxx" --version | head -1) ($cxx)"
else miss "a C++ compiler (c++ or g++ in PATH)"; fi

if [ "$dry" = 0 ]; then
  # the GPU, its driver and compute capability
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total --format=csv,noheader
    cap=$(nvidia-smi -i 0 --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' ')
  else
    miss "nvidia-smi (the NVIDIA driver)"
  fi
  case ${cap:-} in [0-9]*.[0-9]*) ;; *) cap=$("$py" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability(0))' 2>/dev/null) ;; esac
  # nvcc: PATH, CUDA_HOME, /usr/local/cuda, the newest /usr/local/cuda-*
  nvcc=$(command -v nvcc || true)
  [ -n "$nvcc" ] || { [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ] && nvcc=$CUDA_HOME/bin/nvcc; }
  [ -n "$nvcc" ] || { [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc; }
  [ -n "$nvcc" ] || nvcc=$(ls -d /usr/local/cuda-*/bin/nvcc 2>/dev/null | sort -V | tail -1)
  if [ -n "$nvcc" ] && v=$("$nvcc" --version 2>&1 | grep -i release); then
    cuda_home=${CUDA_HOME:-$(dirname "$(dirname "$nvcc")")}
    echo "nvcc: $v ($nvcc, CUDA_HOME $cuda_home)"
    nv_major=$(echo "$v" | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    [ -z "$torchcuda" ] || [ "${torchcuda%%.*}" = "$nv_major" ] || echo "warning: nvcc is CUDA $nv_major, torch was built with CUDA $torchcuda"
  else
    miss "nvcc: not in PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin nor /usr/local/cuda-*/bin"
  fi
  arch_list=${TORCH_CUDA_ARCH_LIST:-${cap:-}}
  [ -n "$arch_list" ] || miss "TORCH_CUDA_ARCH_LIST (GPU 0's compute capability could not be read)"
  # CMake's own list, for its compiler checks (torch's CMake files set
  # CMAKE_CUDA_ARCHITECTURES OFF and add -gencode for TORCH_CUDA_ARCH_LIST;
  # should a torch not, only these architectures are built, not nvcc's default too)
  cudaarchs=${CUDAARCHS:-$(echo "$arch_list" | tr ' ;' '\n\n' | sed 's/+PTX//; s/\.//' | grep . | paste -sd';')}
  echo "TORCH_CUDA_ARCH_LIST=$arch_list CUDAARCHS=$cudaarchs MAX_JOBS=$jobs"
else
  echo "MAX_JOBS=$jobs"
fi
echo "repair: --plat $plat, --exclude ${excl//:/ }"
for t in timeout runuser useradd readelf; do command -v $t >/dev/null || miss "$t"; done
if [ ${#missing[@]} -gt 0 ]; then
  echo "-> FAILED: ${#missing[@]} missing"; record FAIL "host, tools and versions: missing ${missing[*]}"
  finish
fi
echo "-> ok"; record PASS "host, tools and versions"

# ---------------------------------------------------------------------------
# The sandbox: a host-root skeleton, the host's /usr, /etc, /opt read-only
# (and any directory of the tools found outside them), /bin, /lib, ... as
# on the host (symlinks into /usr, or bound).
binds=(-v /usr:/usr:ro -v /etc:/etc:ro)
[ -d /opt ] && binds+=(-v /opt:/opt:ro)
skel_links=(); skel_dirs=(usr etc opt proc dev sys tmp)
for l in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$l" ]; then skel_links+=("$(readlink "/$l"):$l")
  elif [ -d "/$l" ]; then binds+=(-v "/$l:/$l:ro"); skel_dirs+=("$l"); fi
done
extra=()
for d in "$pyprefix" "$pybase" "$(dirname "${torchfile:-/usr/x}")" "${cuda_home:-/usr}" "$(dirname "$cm")" "$(dirname "$cxx")" "$(dirname "$mk")"; do
  r=$(realpath -e "$d" 2>/dev/null) || continue
  case $r/ in /usr/* | /etc/* | /opt/*) continue ;; esac
  case " ${extra[*]-} " in *" $r "*) continue ;; esac
  extra+=("$r"); binds+=(-v "$r:$r:ro")
done
[ ${#extra[@]} -eq 0 ] || echo "also bound read-only: ${extra[*]}"
dev_args=(); [ "$dry" = 1 ] || dev_args=(--device nvidia.com/gpu=all)
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
path=$venvbin:$(dirname "$cm"):$path
[ "$dry" = 1 ] || path=$cuda_home/bin:$path

# as_id ID SECONDS CMD...: CMD as root, or as the user in the single-id mode
as_id() {
  local id=$1 t=$2
  shift 2
  if [ "$id" = root ]; then timeout -k 10 "$t" "${ibenv[@]}" "$@"
  else runuser -u "$user" -- "${ibenv[@]}" IMGBUILD_USERNS=single timeout -k 10 "$t" "$@"; fi
}
# sbx ID W SECONDS [--gpu] CMD...: CMD in the sandbox, W bound read-write
sbx() {
  local id=$1 w=$2 t=$3 d=()
  shift 3
  [ "$1" = --gpu ] && { d=("${dev_args[@]}"); shift; }
  local e=(-e "PATH=$path" -e "HOME=$w/home" -e "TMPDIR=$w/tmp" -e LANG=C.UTF-8
           -e PYTHONDONTWRITEBYTECODE=1 -e PIP_DISABLE_PIP_VERSION_CHECK=1 -e PIP_NO_INPUT=1
           -e PIP_ROOT_USER_ACTION=ignore
           -e "WITH_CUDA=$with_cuda" -e "MAX_JOBS=$jobs")
  e+=(-e VERBOSE=1) # make prints the compile commands into the build log
  [ -z "$gen" ] || e+=(-e "CMAKE_GENERATOR=$gen")
  [ "$dry" = 1 ] || e+=(-e "CUDA_HOME=$cuda_home" -e "CUDA_PATH=$cuda_home" -e "CUDACXX=$nvcc"
                      -e "TORCH_CUDA_ARCH_LIST=$arch_list" -e "CUDAARCHS=$cudaarchs")
  as_id "$id" "$t" "$work/imgbuild" --store "$w/store" run "${d[@]}" "${binds[@]}" -v "$w:$w" \
    "${e[@]}" --rootfs "$w-rootfs" "$@"
}
# logged LOG CMD...: CMD's output into LOG; the log's last lines on failure
logged() {
  local log=$1 rc
  shift
  "$@" >"$log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { echo "--- the last 40 lines of $log:"; tail -40 "$log"; }
  return "$rc"
}
pyq() { "$py" -c "$@"; } # the torch Python on the host, for zip and JSON

build() { # ID W
  local id=$1 w=$2
  if [ ${#pip[@]} -gt 0 ]; then
    logged "$w/build.log" sbx "$id" "$w" "$build_timeout" --gpu -w "$w/src" -- \
      "${pip[@]}" -v wheel --no-deps --no-build-isolation --no-index --no-cache-dir -w "$w/wheels" "$w/src"
  else
    logged "$w/build.log" sbx "$id" "$w" "$build_timeout" --gpu -w "$w/src" -- \
      "$py" setup.py bdist_wheel -d "$w/wheels"
  fi || return
  grep -E 'compiler identification is|Found CUDAToolkit|Found Torch|Created wheel|Successfully built' "$w/build.log" \
    | cut -c1-200 | awk '!seen[$0]++' | head -12
  # the architectures nvcc compiled for (VERBOSE=1: make prints the commands)
  [ "$dry" = 1 ] || echo "nvcc: $(grep -oE -- '-gencode[= ]arch=compute_[0-9a-z]+,code=[^ ]+|--generate-code=arch=compute_[0-9a-z]+,code=[^ ]+' \
    "$w/build.log" | sed 's/^-*[a-z-]*[= ]//' | sort -u | tr '\n' ' ')"
  ls -l "$w/wheels" | tail -n +2
  [ "$(ls "$w/wheels"/*.whl 2>/dev/null | wc -l)" -eq 1 ] || { echo "expected one wheel in $w/wheels"; return 1; }
}

# the external libraries of torch and CUDA among an audit's (the rest: what
# they need in turn, when the host resolves them)
ext_summary='
import json, re, sys
a = json.load(open(sys.argv[1]))
ext = sorted(a.get("external_libs") or {})
tc = [e for e in ext if re.match(r"lib(c10|torch|shm|cu(da|dart|blas|dnn|fft|rand|sparse|solver|pti)|nv|nccl)", e)]
print("overall_tag %s, sym_tag %s; %d external libraries, of torch and CUDA: %s"
      % (a.get("overall_tag"), a.get("sym_tag"), len(ext), " ".join(tc)))
want = ["libc10.so"] + (["libc10_cuda.so"] if sys.argv[2] == "1" else [])
bad = [w for w in want if not any(e.startswith(w) for e in ext)]
if a.get("pure") or bad:
    sys.exit("audit: pure %s, not among the external libraries: %s" % (a.get("pure"), bad))'

audit() { # ID W
  local id=$1 w=$2 whl
  whl=$(ls "$w/wheels"/*.whl)
  as_id "$id" "$run_timeout" "$work/imgbuild" wheel audit "$whl" >"$w/audit.log" || { cat "$w/audit.log"; return 1; }
  # its verdict and what constrains it (the full text: audit.log)
  awk 'BEGIN { RS = "" } { gsub(/\n/, " ") } NR == 1; /^This constrains/ { sub(/\. .*/, "."); print }' "$w/audit.log"
  as_id "$id" "$run_timeout" "$work/imgbuild" wheel audit --json "$whl" >"$w/audit.json" || return
  pyq "$ext_summary" "$w/audit.json" "$with_cuda"
}

repair() { # ID W
  local id=$1 w=$2 whl out rc
  whl=$(ls "$w/wheels"/*.whl)
  out=$(as_id "$id" "$run_timeout" "$work/imgbuild" wheel repair "$whl" --plat "$plat" -w "$w/wheelhouse" \
          "${excludes[@]}" --patchelf "$work/patchelf" 2>&1)
  rc=$?
  echo "$out"
  if [ "$rc" -ne 0 ] && echo "$out" | grep -q 'no manylinux policy named'; then
    local sym
    sym=$(pyq 'import json, sys; print(json.load(open(sys.argv[1]))["sym_tag"])' "$w/audit.json")
    echo "(no policy $plat in imgbuild's table: the audit's sym_tag $sym instead)"
    as_id "$id" "$run_timeout" "$work/imgbuild" wheel repair "$whl" --plat "$sym" -w "$w/wheelhouse" \
      "${excludes[@]}" --patchelf "$work/patchelf" || return
  elif [ "$rc" -ne 0 ]; then return "$rc"; fi
  whl=$(ls "$w/wheelhouse"/*.whl) || return
  [ "$(echo "$whl" | wc -l)" -eq 1 ] || { echo "expected one wheel in $w/wheelhouse"; return 1; }
  # nothing grafted; the extension needs the imported torch's libraries,
  # with no path to the build's torch
  rm -rf "$w/unzipped" && pyq 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$w/unzipped" || return
  pyq '
import os, subprocess, sys
top, gpu = sys.argv[1], sys.argv[2] == "1"
names = sorted(os.path.relpath(os.path.join(d, f), top) for d, _, fs in os.walk(top) for f in fs)
so = [n for n in names if n.startswith("ibtorch_ext/_C") and n.endswith(".so")]
print("members:", " ".join(names))
errs = [] if "-manylinux_" in sys.argv[3] else ["no manylinux tag"]
if [n for n in names if ".libs/" in n]: errs.append("grafted libraries")
if len(so) != 1: sys.exit("repair: extension libraries: %s" % so)
dyn = subprocess.run(["readelf", "-d", os.path.join(top, so[0])], capture_output=True, text=True, check=True).stdout
needed = [l.split("[", 1)[1].rstrip("]") for l in dyn.splitlines() if "(NEEDED)" in l]
print(so[0], "needs:", " ".join(needed))
for w in ["libc10.so"] + (["libc10_cuda.so"] if gpu else []):
    if not any(n.startswith(w) for n in needed): errs.append("needs no " + w)
if "(RPATH)" in dyn or "(RUNPATH)" in dyn: errs.append("has an RPATH/RUNPATH")
sys.exit("repair: " + "; ".join(errs) if errs else 0)' "$w/unzipped" "$with_cuda" "$(basename "$whl")"
}

install_wheel() { # ID W
  local id=$1 w=$2 whl
  whl=$(ls "$w/wheelhouse"/*.whl)
  if [ ${#pip[@]} -gt 0 ]; then
    logged "$w/install.log" sbx "$id" "$w" "$run_timeout" -- \
      "${pip[@]}" install --no-deps --no-index --no-cache-dir --target "$w/site" "$whl" || return
  else
    logged "$w/install.log" sbx "$id" "$w" "$run_timeout" -- "$py" -m zipfile -e "$whl" "$w/site" || return
  fi
  tail -1 "$w/install.log"; ls "$w/site"
}

checks() { # ID W MODE [FILE]
  local id=$1 w=$2 m=$3
  shift 3
  sbx "$id" "$w" "$run_timeout" --gpu -e "PYTHONPATH=$w/site" -w "$w" -- "$py" "$w/check.py" "$m" "$dev" "$w/site" "$@"
}

# ---------------------------------------------------------------------------
for id in $identities; do
  w=$work/$id
  who=$id; [ "$id" = root ] || who="$user (single-id mode)"
  if [ "$id" != root ]; then
    if ! id "$user" >/dev/null 2>&1 && ! useradd -m "$user"; then record FAIL "as $who: useradd"; continue; fi
  fi
  mkdir -p "$w"/{home,tmp,wheels,wheelhouse} "$w-rootfs"
  (cd "$w-rootfs" && mkdir -p "${skel_dirs[@]}" && for s in "${skel_links[@]}"; do ln -s "${s%%:*}" "${s#*:}"; done)
  cp -a recipes/torch-cuda-ext "$w/src" && rm -rf "$w/src/build" "$w/src"/*.egg-info
  install -m 644 tests/gpu/torch-ext-check.py "$w/check.py"
  [ "$id" = root ] || chown -R "$user" "$w" "$w-rootfs"

  if [ "$dry" = 1 ]; then what="WITH_CUDA=0, no --device"; else what="WITH_CUDA=1, --device nvidia.com/gpu=all, TORCH_CUDA_ARCH_LIST=$arch_list"; fi
  step "build as $who: $build_how in imgbuild run ($what)"
  if ! check "build as $who ($what)" build "$id" "$w"; then
    for s in audit repair install operators TorchScript; do record SKIP "$s as $who (no wheel)"; done
    continue
  fi
  step "audit as $who: imgbuild wheel audit"
  check "audit as $who" audit "$id" "$w"
  step "repair as $who: imgbuild wheel repair --plat $plat, the recipe's REPAIR_EXCLUDE"
  if ! check "repair as $who (--plat $plat, nothing grafted)" repair "$id" "$w"; then
    for s in install operators TorchScript; do record SKIP "$s as $who (no repaired wheel)"; done
    continue
  fi
  step "install as $who: $install_how $w/site"
  if ! check "install as $who" install_wheel "$id" "$w"; then
    for s in operators TorchScript; do record SKIP "$s as $who (not installed)"; done
    continue
  fi
  step "operators on ${dev^^} tensors against torch's, as $who"
  check "operators on ${dev^^} tensors as $who" checks "$id" "$w" ops
  step "TorchScript as $who: torch.jit.save, then torch.jit.load in a fresh process"
  if check "TorchScript save as $who" checks "$id" "$w" save "$w/ibtorch_ext_script.pt"; then
    check "TorchScript load as $who" checks "$id" "$w" load "$w/ibtorch_ext_script.pt"
  else record SKIP "TorchScript load as $who (nothing saved)"; fi
done
finish
