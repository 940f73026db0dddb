#!/usr/bin/env bash
# make e2e-slurm: recipes/demo.recipe's matrix (PKG x OPT, 4 cells) built
# through a one-host Slurm cluster (tests/lib/slurm.sh) with the local
# registry as build cache and output, one task cancelled and requeued
# mid-build, and checked against a local --matrix build of the same cells
# (tests/slurm/test_demo_matrix.py); as root and as the unprivileged user
# in map and single-id mode (tests/lib/three-modes.sh).  Needs the Debian
# mirror (both builds install gcc from it, cold).  Not part of `make test`
# (minutes per pass); its time is in README.md.
exec bash "$(dirname "$0")/../lib/three-modes.sh" "Slurm demo matrix" slurm slurm
