#!/usr/bin/env bash
# make fuzz: build the libFuzzer targets (clang, ASan+UBSan) and run each
# for FUZZ_SECONDS (default 60); FUZZ_TARGETS="recipe ref" runs only those.
# Seeds: tests/fuzz/seeds/TARGET (recipe: every instruction, heredocs,
# continuations and the hostile inputs of docs/recipe.md's limits), and for
# the unpack target the hostile layers of tests/fixtures/hostile (made
# here, gzipped and plain), for the wheel target a wheel made here.  The corpus grows in build-fuzz/corpus/TARGET;
# a crash leaves build-fuzz/crashes/TARGET-* and fails the run (make it a
# regression test: tests/unit or tests/fixtures/hostile).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${FUZZ_SECONDS:-60}
out=${FUZZ_BUILD:-build-fuzz}  # FUZZ_BUILD: another directory (parallel checkouts)
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
make -s CC=clang BUILD=$out BIN=$out/bin CFLAGS="-O1 -g -Wno-missing-field-initializers -fno-omit-frame-pointer -fsanitize=fuzzer-no-link $san" \
  LDFLAGS="$san" $out/libimgbuild.a
# (linked: what the Makefile links; the rest has stubs, common/lazylib.h)
pkgs="libcurl jansson libarchive libcrypto libzstd libseccomp zlib libisal yaml-0.1 libelf libxml-2.0"
link_pkgs="jansson libseccomp"
mkdir -p $out/crashes
python3 tests/fixtures/hostile/make_layers.py --seeds $out/seeds-unpack
# a wheel seed: PEP 427's layout and RECORD around an ELF object (/bin/true)
mkdir -p $out/seeds-wheel
python3 - $out/seeds-wheel/demo.whl <<'PY'
import base64, hashlib, sys, zipfile
files = {"demo/x.so": open("/bin/true", "rb").read(), "demo/__init__.py": b"",
         "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
         "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"}
rec = "".join("%s,sha256=%s,%d\n" % (n, base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode(), len(b))
              for n, b in files.items()) + "demo-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for n, b in files.items():
        z.writestr(n, b)
    z.writestr("demo-1.0.dist-info/RECORD", rec)
PY
status=0
for t in ${FUZZ_TARGETS:-ref manifest unpack wheel recipe agent ignore}; do
  clang -std=gnu11 -D_GNU_SOURCE -I. $(pkg-config --cflags $pkgs) -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer $san -o $out/fuzz_$t tests/fuzz/fuzz_$t.c $out/libimgbuild.a \
    $(pkg-config --libs $link_pkgs) -lpthread
  mkdir -p $out/corpus/$t
  seeds=tests/fuzz/seeds/$t
  [ $t = unpack ] && seeds=$out/seeds-unpack
  [ $t = wheel ] && seeds=$out/seeds-wheel
  echo "== fuzz_$t for ${secs}s"
  ASAN_OPTIONS=detect_leaks=1 $out/fuzz_$t -max_total_time="$secs" -max_len=1048576 -rss_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix=$out/crashes/$t- $out/corpus/$t $seeds || status=1
done
exit $status
