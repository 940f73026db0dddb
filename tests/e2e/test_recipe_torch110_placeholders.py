"""recipes/torch110/oriond and recipes/torch110/install-client-9.0, the
placeholders recipes/torch110.recipe copies into the orion-client image
until a user puts the files of their Orion vGPU distribution there: each
says in its own text what it stands for and what goes there, and, run,
fails (exit status 1) with a message naming the file to replace, whatever
its arguments (Orion's client image runs the installer with -q).  Their
second line says PLACEHOLDER (test_recipe_torch110.py reads it in the
built image)."""
import subprocess

import pytest

from conftest import ROOT

DIR = ROOT / "recipes/torch110"


@pytest.mark.parametrize("name, stands_for", [
    ("oriond", "PLACEHOLDER for oriond, the daemon of Orion vGPU"),
    ("install-client-9.0", "PLACEHOLDER for install-client-9.0, Orion vGPU's client installer for\n"
                           "# CUDA 9.0"),
])
def test_placeholder_says_what_it_stands_for_and_fails(name, stands_for, tmp_path):
    path = DIR / name
    text = path.read_text()
    assert text.startswith("#!/bin/sh\n# " + stands_for), text[:200]
    assert "Orion vGPU distribution" in text  # what the user puts there
    for args in ([], ["-q"]):
        # run as the image would, from another directory
        p = subprocess.run([str(path), *args], capture_output=True, text=True, cwd=tmp_path)
        assert p.returncode == 1, p
        assert p.stdout == "", p
        assert f"replace recipes/torch110/{name} with the {name} of your Orion vGPU distribution" \
            in p.stderr, p
