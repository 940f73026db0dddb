"""The store is its owner's alone: another local user must not be able to
put files into the owner's builds (base snapshots keep the image's 1777
directories, tmp and var/tmp).  A new store is made 0700; an existing one
open to others is made private with a warning; a store that belongs to
another user is refused, untouched.  Nor may another user point the store
elsewhere (issue 38, hole 4: a link planted in a shared sticky directory
made the owner's home a store, chmodded and filled, and prune emptied its
tmp/ and snapshots/): its path is checked as fs.protected_symlinks
reasons, a directory that is no store is refused, and prune removes only
the names imgbuild makes.  Runs in every identity mode."""
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import IMGBUILD, imgbuild


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_store_is_private(tmp_path, registry, base_image):
    store = tmp_path / "deep" / "store"
    r = imgbuild("run", base_image, "--", "true", store=store)   # records the base's snapshot
    assert r.rc == 0, r
    assert mode_of(store) == 0o700
    assert mode_of(tmp_path / "deep") == 0o700       # what it had to create on the way too
    snaps = [p for p in (store / "snapshots").iterdir() if p.is_dir()]
    assert any((p / "tmp").is_dir() and mode_of(p / "tmp") == 0o1777 for p in snaps), snaps


def test_open_store_made_private(tmp_path, registry, base_image):
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o755)
    r = imgbuild("pull", base_image, store=store)
    assert r.rc == 0, r
    assert mode_of(store) == 0o700
    assert f"store {store} was open to other users (mode 0755): made private (0700)" in r.err, r
    # once private, nothing more is said
    r = imgbuild("images", store=store)
    assert r.rc == 0 and "open to other users" not in r.err, r


def test_store_of_another_user_refused(tmp_path):
    if os.getuid() == 0:
        other = tmp_path / "theirs"
        other.mkdir(mode=0o755)
        os.chown(other, 65534, 65534)
        owner = 65534
    else:
        other = Path("/usr")     # root's: this user cannot make one of another user's
        owner = 0
    before = mode_of(other)
    r = imgbuild("images", store=other)
    assert r.rc != 0
    last = r.err.strip().splitlines()[-1]
    assert f"open store {other}: {other} belongs to uid " in last, r
    assert "use a store of your own (--store DIR)" in last, r
    assert mode_of(other) == before
    assert not (other / "index.json").exists()
    if os.getuid() == 0:
        assert f"belongs to uid {owner}, not to this user (uid 0)" in last, r


def test_other_user_cannot_poison_a_snapshot(tmp_path, registry, base_image):
    """The reproduction of the report: another user writes into a base
    snapshot's /tmp, hoping the owner's next RUN picks it up.  Only root
    can act as another user here; the unprivileged passes check what
    stops one: nobody but the owner may enter the store."""
    store = tmp_path / "store"
    r = imgbuild("run", base_image, "--", "true", store=store)
    assert r.rc == 0, r
    tmp_path.chmod(0o755)   # as a home directory often is
    snaps = [p for p in (store / "snapshots").iterdir() if (p / "tmp").is_dir()]
    assert snaps
    st = os.stat(store)
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077 == 0
    if os.getuid() == 0:
        target = snaps[0] / "tmp" / "planted"
        p = subprocess.run(["runuser", "-u", "nobody", "--", "touch", str(target)],
                           capture_output=True, text=True)
        assert p.returncode != 0 and "Permission denied" in p.stderr, p
        assert not target.exists()


# --- issue 38, hole 4: a store path through another user's link ---------

def give_to_other(*paths):
    """Make `paths` (files, directories or links, not followed) another
    uid's; returns that uid.  As root: uid 65534.  Unprivileged: the
    first subordinate id, through a user namespace of this user's ranges
    (unshare --map-auto, newuidmap), where it is uid 1; the test is
    skipped where there is none.  take_back undoes it."""
    if os.getuid() == 0:
        for p in paths:
            os.lchown(p, 65534, 65534)
        return 65534
    if shutil.which("unshare") is None or shutil.which("newuidmap") is None:
        pytest.skip("owning a file as another uid needs root, or unshare and newuidmap "
                    "with subordinate ids")
    p = subprocess.run(["unshare", "--map-root-user", "--map-auto", "chown", "-h", "1:1",
                        *map(str, paths)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"owning a file as another uid needs root or subordinate ids: {p.stderr}")
    return os.lstat(paths[0]).st_uid


def take_back(*paths):
    """This user's again, so that the test's directory can be removed."""
    if os.getuid() != 0:
        subprocess.run(["unshare", "--map-root-user", "--map-auto", "chown", "-h", "0:0",
                        *map(str, paths)], capture_output=True)


def a_home(tmp_path):
    """A directory of this user's as a home is: files, a tmp/ and a
    snapshots/ of its own, mode 0755."""
    home = tmp_path / "home"
    for rel in ("notes.txt", "tmp/draft", "snapshots/holiday/photo"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(f"mine: {rel}\n")
    home.chmod(0o755)
    return home


def tree_of(path):
    """What a test must find unchanged: every entry's mode and content."""
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for n in dirs + files:
            p = Path(dirpath) / n
            out[str(p.relative_to(path))] = (os.lstat(p).st_mode,
                                             p.read_text() if p.is_file() else None)
    out["."] = os.lstat(path).st_mode
    return out


def last_line(r):
    return r.err.strip().splitlines()[-1]


def test_store_through_a_link_in_another_users_sticky_dir(tmp_path):
    """The report's reproduction: user B's sticky world-writable directory
    holds B's `link-store -> A's home`; `imgbuild --store LINK images` and
    `prune --all` (which checks the path before it enters its user
    namespace) are refused, naming B's directory, and the home is as it
    was."""
    home = a_home(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    link = shared / "link-store"
    link.symlink_to(home)
    before = tree_of(home)
    other = give_to_other(shared, link)
    try:
        for args in (["images"], ["prune", "--all"]):
            r = imgbuild(*args, store=link)
            assert r.rc == 1, r
            assert last_line(r) == (
                f"imgbuild: open store {link}: {shared} belongs to uid {other}, not to this user "
                f"(uid {os.getuid()}) or root: its owner could put anything in the store's "
                "place; use a store of your own (--store DIR)"), r
            assert tree_of(home) == before
    finally:
        take_back(shared, link)


def test_store_through_another_users_link_in_a_sticky_dir(tmp_path):
    """A link another uid planted in a sticky directory every user may
    write (this user's here, root's as /tmp is): not followed, in every
    command, whichever directory it points at; as root too (a link of an
    unprivileged uid)."""
    home = a_home(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    link = shared / "link-store"
    link.symlink_to(home)
    before = tree_of(home)
    other = give_to_other(link)
    want = (f"{link} is a symbolic link of uid {other}, not of this user (uid {os.getuid()}) or "
            "root: its owner could point the store anywhere; give the store's path without it "
            "(--store DIR)")
    try:
        for args in (["images"], ["prune", "--all"], ["unpack", "x:1", tmp_path / "rootfs"]):
            r = imgbuild(*args, store=link)
            assert r.rc == 1, r
            assert last_line(r) == f"imgbuild: open store {link}: {want}", r
            assert tree_of(home) == before
        # below the link too
        r = imgbuild("prune", store=link / "store")
        assert r.rc == 1 and last_line(r) == f"imgbuild: open store {link}/store: {want}", r
        assert tree_of(home) == before
    finally:
        take_back(link)


def test_own_link_is_followed(tmp_path, registry, base_image):
    """One's own link (as root's, /var/run -> /run) is followed: the store
    is where it points, made there."""
    real = tmp_path / "disk"
    real.mkdir()
    link = tmp_path / "store-link"
    link.symlink_to(real)
    r = imgbuild("pull", base_image, store=link / "store")
    assert r.rc == 0, r
    assert (real / "store" / "oci-layout").is_file()
    assert mode_of(real / "store") == 0o700


def test_directory_that_is_no_store_refused(tmp_path):
    """A directory with files and no oci-layout (a home, given by mistake)
    is neither chmodded nor filled."""
    home = a_home(tmp_path)
    before = tree_of(home)
    for args in (["images"], ["prune", "--all"]):
        r = imgbuild(*args, store=home)
        assert r.rc == 1, r
        assert last_line(r) == (
            f"imgbuild: open store {home}: {home} is not an imgbuild store (no oci-layout, and it "
            "holds 'notes.txt'): imgbuild would make it private (0700) and "
            "fill it; give a new or empty directory, or an existing store (--store DIR)"), r
        assert tree_of(home) == before


def test_prune_leaves_names_it_does_not_make(tmp_path):
    """prune --all removes what imgbuild left in tmp/ and snapshots/ and
    leaves anything else there, saying so at debug level."""
    store = tmp_path / "store"
    assert imgbuild("prune", store=store).rc == 0   # makes the store
    assert (store / "oci-layout").is_file()
    foreign = ["tmp/notes.txt", "tmp/Downloads/a", "snapshots/holiday/photo",
               "blobs/sha256/README"]
    for rel in foreign:
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_text("mine\n")
    (store / "tmp/stage-dead").mkdir()                  # what a killed build leaves
    (store / "tmp/stage-dead/f").write_text("x")
    (store / "snapshots" / ("ab" * 32)).mkdir()         # a snapshot by chain id
    r = imgbuild("-v", "prune", "--all", store=store)
    assert r.rc == 0, r
    assert "temporary files:      1 removed" in r.out, r
    assert "snapshots:            1 removed" in r.out, r
    for rel in foreign:
        assert (store / rel).read_text() == "mine\n", rel
    assert not (store / "tmp/stage-dead").exists()
    assert not (store / "snapshots" / ("ab" * 32)).exists()
    assert (f"imgbuild: debug: prune: {store}/tmp/notes.txt: not a name imgbuild makes: left as "
            "it is") in r.err, r
    assert f"prune: {store}/snapshots/holiday: not a name imgbuild makes" in r.err, r


def test_xdg_data_home_of_another_user(tmp_path):
    """The default store under $XDG_DATA_HOME pointing into another user's
    directory (one every user may write, so that nothing but the check
    stops it): refused before anything is made there."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)
    other = give_to_other(theirs)
    try:
        env = {k: v for k, v in os.environ.items() if k != "IMGBUILD_STORE"}
        env["XDG_DATA_HOME"] = str(theirs)
        for args in (["pull", "127.0.0.1:9/none:1"], ["prune", "--all"],
                     ["unpack", "x:1", tmp_path / "rootfs"]):
            p = subprocess.run([str(IMGBUILD), *map(str, args)], env=env, capture_output=True,
                               text=True)
            assert p.returncode == 1, p
            assert p.stderr.strip().splitlines()[-1] == (
                f"imgbuild: open store {theirs}/imgbuild: {theirs} belongs to uid {other}, not "
                f"to this user (uid {os.getuid()}) or root: its owner could put anything in the "
                "store's place; use a store of your own (--store DIR)"), p
            assert os.listdir(theirs) == []
            assert mode_of(theirs) == 0o777
    finally:
        take_back(theirs)
