#!/usr/bin/env bash
# make e2e-torch: the real torch build (tests/torch/test_torch_ext.py):
# recipes/torch-cuda-ext.recipe on a Debian bookworm stand-in base with
# python3-torch 1.13.1 from the mirror, the extension compiled against it,
# its wheel repaired, imported and checked in a client image; as root and
# as the unprivileged user in map and single-id mode (tests/lib/three-modes.sh).
# Needs the Debian mirror once per mode (the stand-in's apt step is then
# cached in $IMGBUILD_TEST_CACHE/torch-ext.uidUID/standin-MODE, about 1 GB
# each).  Not part of `make test`: a warm pass takes minutes (the C++
# compile against libtorch's headers alone is about a minute on 2 cores);
# the times measured are in docs/recipes.md.
exec bash "$(dirname "$0")/../lib/three-modes.sh" "torch extension build" torch torch-ext
