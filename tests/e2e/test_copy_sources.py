"""COPY sources as Docker reads them: patterns (`*`, `?`, `[...]`),
.dockerignore (and RECIPE.dockerignore beside the recipe), --exclude,
--parents; what lands in the image and what the cache key sees.  A
FROM scratch stage with a static busybox, so no registry is needed."""
import shutil

from conftest import imgbuild, write


def tree(store, ref, *dirs):
    r = imgbuild("run", ref, "--", "/bin/busybox", "find", *dirs, store=store)
    assert r.rc == 0, r
    return sorted(r.out.split())


def steps(r):
    return [l for l in r.err.splitlines() if l.startswith("[") and " COPY " in l]


RECIPE = """FROM scratch
COPY busybox /bin/busybox
COPY src/*.py /py/
COPY --exclude=*.txt --exclude=sub src /all/
COPY . /ctx/
COPY --parents src/sub/s.py src/keep /par/
COPY src/[ab].py src/?.txt /one/
OUTPUT type=image,name=copysrc:latest
"""


def make_ctx(tmp_path):
    c = tmp_path / "ctx"
    for p, t in {"src/a.py": "a", "src/b.py": "b", "src/c.txt": "c", "src/sub/s.py": "s",
                 "node_modules/x/n.js": "n", "src/keep/k.log": "k", "src/keep/z.log": "z",
                 ".dockerignore": "# deps\nnode_modules\n**/*.log\n!src/keep/k.log\n"}.items():
        write(c / p, t + "\n")
    shutil.copy("/bin/busybox", c / "busybox")
    write(c / "r.recipe", RECIPE)
    return c


def test_patterns_dockerignore_exclude_parents(tmp_path):
    store = tmp_path / "store"
    c = make_ctx(tmp_path)
    r = imgbuild("build", c / "r.recipe", store=store)
    assert r.rc == 0, r
    assert tree(store, "copysrc:latest", "/py", "/all", "/par", "/one") == sorted([
        "/py", "/py/a.py", "/py/b.py",
        # --exclude: *.txt and sub/ relative to the source; .dockerignore too
        "/all", "/all/a.py", "/all/b.py", "/all/keep", "/all/keep/k.log",
        # --parents keeps the sources' paths
        "/par", "/par/src", "/par/src/sub", "/par/src/sub/s.py", "/par/src/keep",
        "/par/src/keep/k.log",
        "/one", "/one/a.py", "/one/b.py", "/one/c.txt"])
    ctx = tree(store, "copysrc:latest", "/ctx")
    assert "/ctx/node_modules" not in ctx and "/ctx/src/keep/z.log" not in ctx
    assert "/ctx/src/keep/k.log" in ctx and "/ctx/.dockerignore" in ctx

    # an ignored file changes: no step reruns
    write(c / "node_modules/x/n.js", "changed\n")
    write(c / "src/keep/z.log", "changed\n")
    r = imgbuild("build", c / "r.recipe", store=store)
    assert r.rc == 0, r
    assert all(l.endswith(" CACHED") for l in steps(r)), r.err
    # a file only /ctx and /one copy (c.txt is --exclude'd from /all)
    write(c / "src/c.txt", "changed\n")
    r = imgbuild("build", c / "r.recipe", store=store)
    cached = {l.split("] ")[1].rsplit(" CACHED", 1)[0]: l.endswith(" CACHED") for l in steps(r)}
    assert cached["COPY src/*.py /py/"] and cached["COPY src /all/"], r.err
    assert not cached["COPY . /ctx/"] and not cached["COPY src/[ab].py src/?.txt /one/"], r.err
    # a new file matching a pattern is a change for that step
    write(c / "src/d.py", "d\n")
    r = imgbuild("build", c / "r.recipe", store=store)
    cached = {l.split("] ")[1].rsplit(" CACHED", 1)[0]: l.endswith(" CACHED") for l in steps(r)}
    assert not cached["COPY src/*.py /py/"], r.err
    assert "/py/d.py" in tree(store, "copysrc:latest", "/py")


def test_recipe_dockerignore_wins_and_errors(tmp_path):
    store = tmp_path / "store"
    c = make_ctx(tmp_path)
    # RECIPE.dockerignore beside the recipe replaces the context's
    write(c / "r.recipe.dockerignore", "src/b.py\n")
    r = imgbuild("build", c / "r.recipe", store=store)
    assert r.rc == 0, r
    assert tree(store, "copysrc:latest", "/py") == ["/py", "/py/a.py"]
    assert "/ctx/node_modules" in tree(store, "copysrc:latest", "/ctx")
    # a pattern matching nothing, an ignored explicit file
    write(c / "bad.recipe", "FROM scratch\nCOPY src/*.rs /x/\n")
    r = imgbuild("build", c / "bad.recipe", store=store)
    assert r.rc != 0
    assert "bad.recipe:2: COPY: src/*.rs: no source files were specified" in r.err, r.err
    write(c / "bad2.recipe", "FROM scratch\nCOPY node_modules/x/n.js /x/\n")
    r = imgbuild("build", c / "bad2.recipe", store=store)
    assert r.rc != 0
    assert "node_modules/x/n.js: no such file or directory in the build context (excluded by .dockerignore)" in r.err, r.err


# .dockerignore with exceptions, as BuildKit applies it (moby/patternmatcher
# MatchesUsingParentResults: the last pattern matching a path or one of its
# parents decides; tonistiigi/fsutil's walker: an excluded directory is
# walked for the exceptions below it, and sent only with an included child).
# The rules are podman's and buildah's own .dockerignore test
# (tests/bud/dockerignore); buildah 1.28 differs from BuildKit there
# (subdir2/sub1 stays excluded: its walker skips an excluded directory that
# no exception names literally), so the expected trees are BuildKit's.
IGNORE_CASES = {
    "exceptions": (
        "# comment\ntest*\n!test2*\nsubdir1\nsubdir2\n!*/sub1*\n!subdir1/sub3*\n",
        ["test1", "test1.txt", "test2", "test2.txt", "subdir1/sub1", "subdir1/sub1.txt",
         "subdir1/sub2", "subdir1/sub2.txt", "subdir1/sub3", "subdir1/sub3.txt",
         "subdir2/sub1", "subdir2/sub1.txt", "subdir2/sub2", "subdir2/sub2.txt",
         "subdir3/sub2", "comment"],
        # .dockerignore and the Dockerfile are context files like the others
        [".dockerignore", "Dockerfile", "busybox", "comment", "subdir1", "subdir1/sub1",
         "subdir1/sub1.txt", "subdir1/sub3", "subdir1/sub3.txt", "subdir2", "subdir2/sub1",
         "subdir2/sub1.txt", "subdir3", "subdir3/sub2", "test2", "test2.txt"]),
    # everything excluded but what an exception names: .dockerignore and the
    # Dockerfile too; subdir only for the file an exception includes
    "star": (
        "*\n!busybox\nsubdir\n!*/sub1*\n",
        ["subdir/sub1", "subdir/other", "top"],
        ["busybox", "subdir", "subdir/sub1"]),
    # rules after an exception apply below it
    "after-exception": (
        "*\n!busybox\n!src\n**/*.in\nsrc/etc\n",
        ["src/a.c", "src/a.in", "src/etc/conf", "src/sub/b.in", "src/sub/b.c", "top.in",
         "other"],
        ["busybox", "src", "src/a.c", "src/sub", "src/sub/b.c"]),
}


def test_dockerignore_exceptions_as_buildkit(tmp_path):
    store = tmp_path / "store"
    for name, (rules, files, want) in IGNORE_CASES.items():
        c = tmp_path / name
        for f in files:
            write(c / f, f + "\n")
        write(c / ".dockerignore", rules)
        shutil.copy("/bin/busybox", c / "busybox")
        write(c / "Dockerfile", f"FROM scratch\nCOPY ./ /c/\nCOPY busybox /bin/busybox\n"
                                f"OUTPUT type=image,name=ign:{name}\n")
        r = imgbuild("build", c, store=store)
        assert r.rc == 0, r
        got = [p[3:] for p in tree(store, f"ign:{name}", "/c") if p != "/c"]
        assert got == sorted(want), (name, got)
    # a file the rules exclude changes: the COPY stays cached; one an
    # exception includes changes: it runs
    c = tmp_path / "exceptions"
    write(c / "subdir2/sub2.txt", "changed\n")
    write(c / "test1", "changed\n")
    r = imgbuild("build", c, store=store)
    assert r.rc == 0, r
    assert all(l.endswith(" CACHED") for l in steps(r)), r.err
    write(c / "subdir2/sub1.txt", "changed\n")
    r = imgbuild("build", c, store=store)
    assert r.rc == 0, r
    assert not steps(r)[0].endswith(" CACHED"), r.err
