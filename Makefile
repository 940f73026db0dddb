# imgbuild — GNU make build. `make` builds bin/imgbuild; see README.md.
PKGS     := libcurl jansson libarchive libcrypto libzstd libseccomp zlib libisal yaml-0.1 libelf libxml-2.0
CC       ?= cc
CFLAGS   ?= -O2 -g
# Project flags stay even when CFLAGS is given on the command line (make asan).
# Linked: jansson (common/ uses it) and libseccomp (the sandbox loads its
# filter after pivot_root, where no library may be loaded).  Loaded on
# first use (common/lazylib.h), by the soname of the library the build
# found: the rest, which cost a process most of its start-up (libcurl,
# libarchive and their 40 dependencies).
LAZY_PKGS := libcurl libarchive libcrypto yaml-0.1 libelf libxml-2.0 libzstd zlib libisal
LINK_PKGS := $(filter-out $(LAZY_PKGS),$(PKGS))
# (the library the linker would take: $(CC) -print-file-name; a stub file
# refuses to compile when its soname is empty)
soname = $(shell objdump -p "$$($(CC) -print-file-name=$(1).so)" 2>/dev/null | \
           awk '$$1 == "SONAME" { print $$2 }')
SONAMES := -DIB_SONAME_CURL='"$(call soname,libcurl)"' \
           -DIB_SONAME_ARCHIVE='"$(call soname,libarchive)"' \
           -DIB_SONAME_CRYPTO='"$(call soname,libcrypto)"' \
           -DIB_SONAME_YAML='"$(call soname,libyaml)"' \
           -DIB_SONAME_ELF='"$(call soname,libelf)"' \
           -DIB_SONAME_XML='"$(call soname,libxml2)"' \
           -DIB_SONAME_ZSTD='"$(call soname,libzstd)"' \
           -DIB_SONAME_ZLIB='"$(call soname,libz)"' \
           -DIB_SONAME_ISAL='"$(call soname,libisal)"'
IB_CFLAGS := -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -I. $(shell pkg-config --cflags $(PKGS)) \
             $(SONAMES)
LDLIBS   += $(shell pkg-config --libs $(LINK_PKGS)) -lpthread
BUILD    ?= build
BIN      ?= bin

# builder/ is in wings (subfolders, docs/design.md); every other floor is flat.
# The CLI wing (builder/cli/, main() included) goes into bin/imgbuild only:
# unit tests and fuzzers link the library.
CLI_SRC  := $(wildcard builder/cli/*.c)
LIB_SRC  := $(wildcard common/*.c oci/*.c rootfs/*.c) \
            $(filter-out builder/cli/%,$(wildcard builder/*/*.c))
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
HEADERS  := $(wildcard */*.h builder/*/*.h)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all man install uninstall deps test unit e2e e2e-realworld e2e-debian-wheels e2e-torch e2e-frameworks e2e-slurm asan fuzz demo clean lint
all: $(BIN)/imgbuild

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(IB_CFLAGS) $(CFLAGS) -c -o $@ $<

# builder/wheel/policy.c embeds the manylinux policy table (.incbin, path
# relative to the top directory, where make runs the compiler).
$(BUILD)/builder/wheel/policy.o: data/manylinux-policy.json

$(BUILD)/libimgbuild.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BIN)/imgbuild: $(CLI_OBJ) $(BUILD)/libimgbuild.a
	@mkdir -p $(BIN)
	$(CC) $(IB_CFLAGS) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

# (no test links a library that has stubs: the library would then call the
# program's stub, not its own function; what only tests call has a stub too)
$(BUILD)/tests/%: tests/unit/%.c tests/unit/unit.h $(BUILD)/libimgbuild.a
	@mkdir -p $(dir $@)
	$(CC) $(IB_CFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libimgbuild.a $(LDFLAGS) $(LDLIBS) -lcmocka

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the binary, the man pages,
# bash completion and the docs (GNU's directory variables).
PREFIX      ?= /usr/local
bindir      ?= $(PREFIX)/bin
datadir     ?= $(PREFIX)/share
mandir      ?= $(datadir)/man
docdir      ?= $(datadir)/doc/imgbuild
bashcompdir ?= $(datadir)/bash-completion/completions

# Man pages, cut from docs/cli.md (docs/man/mkman.sh; needs go-md2man):
# imgbuild(1) and imgbuild-COMMAND(1).
MAN_DIR  ?= $(BUILD)/man
man: $(MAN_DIR)/imgbuild.1
$(MAN_DIR)/imgbuild.1: docs/cli.md docs/man/mkman.sh $(BIN)/imgbuild
	rm -rf $(MAN_DIR) && sh docs/man/mkman.sh docs/cli.md $(BIN)/imgbuild $(MAN_DIR) $(docdir)

install: all man
	install -d $(DESTDIR)$(bindir) $(DESTDIR)$(mandir)/man1 $(DESTDIR)$(docdir) $(DESTDIR)$(bashcompdir)
	install -m 0755 $(BIN)/imgbuild $(DESTDIR)$(bindir)/imgbuild
	install -m 0644 $(MAN_DIR)/*.1 $(DESTDIR)$(mandir)/man1/
	install -m 0644 completions/imgbuild.bash $(DESTDIR)$(bashcompdir)/imgbuild
	install -m 0644 README.md docs/*.md $(DESTDIR)$(docdir)/
uninstall:
	rm -f $(DESTDIR)$(bindir)/imgbuild $(DESTDIR)$(mandir)/man1/imgbuild.1 \
	  $(DESTDIR)$(mandir)/man1/imgbuild-*.1 $(DESTDIR)$(bashcompdir)/imgbuild
	rm -rf $(DESTDIR)$(docdir)

deps:
	bash tests/install-deps.sh

unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done
	@echo "== $(BUILD)/tests/test_sandbox, single-id mode"; IMGBUILD_USERNS=single $(BUILD)/tests/test_sandbox

# The whole suite: clang's checks, unit tests, then the e2e suite as root and
# as an unprivileged user.
test: all lint unit
	bash tests/run-e2e.sh

# clang -fsyntax-only over every source: it refuses a goto that jumps over
# the declaration of a variable with a cleanup attribute (the cleanup would
# free an uninitialised pointer), which gcc accepts silently.
lint:
	clang -std=gnu11 -Wall -Wextra -Werror -Wno-missing-field-initializers -D_GNU_SOURCE -I. \
	  $(shell pkg-config --cflags $(PKGS)) $(SONAMES) -fsyntax-only $(LIB_SRC) $(CLI_SRC) $(UNIT_SRC)

e2e: all $(UNIT_BIN)
	bash tests/run-e2e.sh

# Real-world multi-stage Dockerfiles built unchanged (tests/realworld): a
# Go build of CNCF distribution from Debian's source package, on stand-in
# base images made from Debian packages.  Not part of `make test` (a few
# minutes more, and 1 GB of stand-in images); docs/benchmarks.md has its time.
e2e-realworld: all
	bash tests/realworld/run.sh

# Wheels from real Debian sources (tests/e2e/test_wheel_debian.py):
# markupsafe, python-rapidjson, python-snappy and python-xxhash from
# bookworm's orig tarballs on the Debian mirror, built inside imgbuild,
# audited (answers checked against auditwheel's, recorded), repaired and
# imported.  Not part of `make test`: it needs the mirror's source archive.
# As root; docs/recipe.md ("Wheels") has its time.
e2e-debian-wheels: all
	IMGBUILD_DEBIAN_WHEELS=1 \
	  /usr/bin/python3 -m pytest -p no:cacheprovider -q -s tests/e2e/test_wheel_debian.py

# The real torch build (tests/torch): recipes/torch-cuda-ext.recipe compiles
# its C++ extension against Debian's python3-torch 1.13.1 on a bookworm
# stand-in base, the wheel is repaired, installed in a client image and its
# operators checked against torch's.  Not part of `make test` (minutes per
# pass even with the stand-in's apt step cached); docs/recipes.md has its time.
e2e-torch: all
	bash tests/torch/run.sh

# torchvision 0.14.1 from source through recipes/torch110.recipe, the
# orion-style client image (tests/frameworks/run.sh)
e2e-frameworks: all
	bash tests/frameworks/run.sh

# recipes/demo.recipe's matrix through a one-host Slurm cluster, checked
# against a local --matrix (tests/slurm); minutes per identity mode
e2e-slurm: all
	bash tests/slurm/run.sh

# ASAN_BUILD / ASAN_BIN: other directories (two builds in one checkout).
ASAN_BUILD ?= build-asan
ASAN_BIN   ?= bin-asan
asan:
	ASAN_OPTIONS=fast_unwind_on_malloc=0 $(MAKE) BUILD=$(ASAN_BUILD) BIN=$(ASAN_BIN) CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" LDFLAGS="-fsanitize=address,undefined" all unit

# libFuzzer targets (clang): ref, manifest/index/config, layer unpack, wheel,
# recipe (parser and expansion), agent (the ssh relay's frame filter),
# ignore (the .dockerignore matcher); each runs FUZZ_SECONDS (default 60),
# FUZZ_TARGETS picks some.  tests/fuzz/run.sh says more.
fuzz:
	bash tests/fuzz/run.sh

demo:
	bash tests/demo.sh

clean:
	rm -rf build build-asan build-fuzz bin bin-asan
