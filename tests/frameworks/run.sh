#!/usr/bin/env bash
# make e2e-frameworks: the real framework builds (tests/frameworks/):
# torchvision 0.14.1 compiled from its source by recipes/torch110.recipe's
# own steps against Debian's torch 1.13.1, the wheel repaired, the
# orion-style client image checked (test_torchvision.py); as root and as
# the unprivileged user in map and single-id mode (tests/lib/three-modes.sh).
# Needs the Debian mirror once per mode (the stand-in's apt step is then
# cached in $IMGBUILD_TEST_CACHE/frameworks.uidUID/standin-MODE, about 1 GB
# each; torchvision's source tarball in $IMGBUILD_TEST_CACHE/sources).  Not
# part of `make test`: each pass compiles torchvision (minutes); the times
# measured are in docs/recipes.md.
exec bash "$(dirname "$0")/../lib/three-modes.sh" "framework builds" frameworks frameworks
