"""Hostile layers end to end (issue 4, "Unpack must be safe"): each attack
of tests/fixtures/hostile/make_layers.py, made into an image, pushed to the
registry and unpacked with `imgbuild unpack`.  Whatever the layer holds,
the directory outside the target stays byte for byte as it was, no file
appears beside it, and a refused layer fails with one error line naming
the entry and leaves neither a rootfs nor a stored image behind.

Then a hostile repository's other inputs (issue 38): a .dockerignore made
to take exponential time, and a recipe whose text holds terminal control
characters, shown by `imgbuild plan`."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import IMGBUILD, ROOT, imgbuild, sh, stored_names

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "hostile"))
import make_layers  # noqa: E402


def snapshot(d):
    """Every path under d (and d's parent's entries) with type, mode and content hash."""
    out = {}
    for p in sorted([d, *d.rglob("*")]):
        st = p.lstat()
        h = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
        out[str(p)] = (st.st_mode, st.st_nlink, h)
    out["<siblings>"] = sorted(os.listdir(d.parent))
    return out


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    d = tmp_path_factory.mktemp("outside")
    (d / "sentinel").write_text("do not touch\n")
    (d / "sub").mkdir()
    (d / "sub" / "file").write_text("nor this\n")
    return d


@pytest.fixture(scope="module")
def hostile(registry, outside, tmp_path_factory):
    """name -> (reference in the registry, expected)."""
    layouts = tmp_path_factory.mktemp("hostile-layouts")
    refs = {}
    for name, (layers, expected) in make_layers.attacks(str(outside)).items():
        make_layers.write_layout(str(layouts / name), layers)
        ref = f"{registry}/hostile/{name}:1"
        sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layouts / name}:1",
           f"docker://{ref}")
        refs[name] = (ref, expected)
    return refs


NAMES = list(make_layers.attacks("/nowhere"))


@pytest.mark.parametrize("name", NAMES)
def test_hostile_layer(hostile, outside, tmp_path, name):
    ref, (outcome, text) = hostile[name]
    before = snapshot(outside)
    store, root = tmp_path / "store", tmp_path / "root"
    r = imgbuild("unpack", ref, root, store=store,
                 env={"IMGBUILD_MAX_LAYER_BYTES": str(16 << 20)})
    assert snapshot(outside) == before, r
    assert not (outside.parent / "escape").exists() and not Path("/escape").exists()
    if outcome == "ok":
        assert r.rc == 0, r
        assert root.is_dir()
        if name == "device-node":
            assert not (root / "dev" / "evil-null").exists()
            assert "device node" in r.err, r
        return
    assert r.rc == 1, r
    lines = [l for l in r.err.strip().splitlines() if not l.startswith("imgbuild: warning:")]
    last = lines[-1]
    assert last.startswith(f"imgbuild: pull {ref}: ") or last.startswith("imgbuild: unpack "), r
    assert "layer" in last, r
    assert text in last, r
    assert not root.exists(), r
    assert stored_names(store) == []


def test_dockerignore_double_stars_take_linear_time(tmp_path):
    """`**` + "/" forty times, then `q`, against a context 30 directories
    deep: the recursive matcher took 3.8 s for six of them, 38 s for
    eight, and would not have finished forty in a lifetime (issue 38);
    the NFA takes milliseconds.  The rules still hold: "q" is excluded at
    any depth (a file, or a directory with all below it), "keep" and
    "xq" are not."""
    ctx = tmp_path / "ctx"
    deep = Path(*["d"] * 30)
    for rel, text in {deep / "keep": "kept\n", deep / "xq": "kept too\n", Path("top"): "kept\n",
                      deep / "q": "excluded\n", deep / "e" / "q" / "inner": "excluded\n",
                      Path("q"): "excluded\n"}.items():
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        (ctx / rel).write_text(text)
    (ctx / ".dockerignore").write_text("**/" * 40 + "q\n")
    out = tmp_path / "out"
    (ctx / "Dockerfile").write_text(f"FROM scratch\nCOPY . /ctx/\nOUTPUT type=local,dest={out},src=/ctx\n")
    r = imgbuild("build", ctx, store=tmp_path / "store", timeout=120)
    assert r.rc == 0, r
    got = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert got == sorted([".dockerignore", "Dockerfile", "top", str(deep / "keep"),
                          str(deep / "xq")]), got
    assert (out / deep / "keep").read_text() == "kept\n"
    assert not (out / deep / "q").exists() and not (out / "q").exists()
    assert not (out / deep / "e" / "q").exists()


def test_a_pattern_buildkit_refuses_fails_the_build(tmp_path):
    """A .dockerignore pattern or a COPY --exclude value that
    moby/patternmatcher's New refuses fails the build, as BuildKit's
    ("invalid excludepatterns: [...]: syntax error in pattern"), naming
    the file and the pattern; before, such a pattern silently matched
    nothing."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "a.txt").write_text("a\n")
    out = tmp_path / "out"
    (ctx / "Dockerfile").write_text(f"FROM scratch\nCOPY . /ctx/\nOUTPUT type=local,dest={out},src=/ctx\n")
    (ctx / ".dockerignore").write_text("# comment\nbuild\n[Local-Only]/\n")
    r = imgbuild("build", ctx, store=tmp_path / "store", timeout=120)
    assert r.rc != 0, r
    assert f"{ctx}/.dockerignore: pattern '[Local-Only]': syntax error in pattern" in r.err, r.err
    assert not out.exists()
    (ctx / ".dockerignore").write_text("*.o\n!keep[0-9].o\n")
    r = imgbuild("build", ctx, store=tmp_path / "store", timeout=120)
    assert r.rc == 0, r.err[-3000:]
    assert (out / "a.txt").read_text() == "a\n"
    # COPY --exclude: the same check
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY --exclude=*.o --exclude=a[ . /ctx/\n")
    r = imgbuild("build", ctx, store=tmp_path / "store", timeout=120)
    assert r.rc != 0, r
    assert "--exclude: pattern 'a[': syntax error in pattern" in r.err, r.err


# ESC (an OSC that sets the window title, a CSI that clears the screen),
# BEL, CR (overwrites what the line showed), BS, DEL, VT, and the C1 CSI
# and OSC (U+009B, U+009D)
CONTROLS = b"\x1b]0;pwned\x07 \x1b[2J\x1b[H \r\x08\x7f\x0b \xc2\x9b31m \xc2\x9d0;t\x07"
SHOWN = "?]0;pwned? ?[2J?[H ???? ?31m ?0;t?"
RAW = set(range(0x20)) - {0x0a} | {0x7f} | set(range(0x80, 0xa0))


def plan_bytes(tmp_path, recipe, *args):
    """`imgbuild plan`'s stdout as bytes (a raw control byte or a stray
    byte must not be decoded away)."""
    r = subprocess.run([str(IMGBUILD), "--store", str(tmp_path / "store"), "plan", *args,
                        recipe.name], cwd=tmp_path, capture_output=True, timeout=120)
    assert r.returncode == 0, r
    return r.stdout


def test_plan_shows_control_characters_escaped(tmp_path):
    """`imgbuild plan` prints the recipe's text as the build's display
    does: each control character (C0 but the line break, DEL, C1) as '?',
    so a LABEL cannot retitle or clear the caller's terminal (issue 38:
    they went out raw)."""
    recipe = tmp_path / "evil.recipe"
    recipe.write_bytes(b"FROM scratch\nLABEL title=\"" + CONTROLS + b"\"\n"
                       b"ENV E=\"" + CONTROLS + b"\"\nRUN echo \"" + CONTROLS + b"\"\n")
    text = plan_bytes(tmp_path, recipe).decode("utf-8")
    bad = sorted({ord(c) for c in text} & RAW)
    assert not bad, (bad, text)
    lines = text.splitlines()
    assert f"  line 2: LABEL title='{SHOWN}'" in lines, text
    assert [l for l in lines if l.startswith("  line 3: ENV E=") and SHOWN in l], text
    assert f'  line 4: RUN echo "{SHOWN}"' in lines, text
    # --json keeps the values, escaped as JSON escapes them
    out = plan_bytes(tmp_path, recipe, "--json")
    assert not set(out) & (set(range(0x20)) - {0x0a}), out
    assert json.loads(out)["stages"][0]["steps"][0]["labels"]["title"] == CONTROLS.decode()


def test_plan_shows_a_stray_c1_byte(tmp_path):
    """A raw 0x9b (CSI on an 8-bit terminal, not UTF-8): U+FFFD in the
    plan, text and JSON alike (JSON cannot hold the byte; the value used
    to vanish from both)."""
    recipe = tmp_path / "stray.recipe"
    recipe.write_bytes(b"FROM scratch\nLABEL title=\"a\x9b" b"2Jb\"\n")
    out = plan_bytes(tmp_path, recipe)
    assert not set(out) & RAW, out
    assert "  line 2: LABEL title='a\ufffd2Jb'\n" in out.decode("utf-8"), out
    step = json.loads(plan_bytes(tmp_path, recipe, "--json"))["stages"][0]["steps"][0]
    assert step["labels"] == {"title": "a\ufffd2Jb"}, step
