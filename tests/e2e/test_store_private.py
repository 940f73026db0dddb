"""The store is its owner's alone: another local user must not be able to
put files into the owner's builds (base snapshots keep the image's 1777
directories, tmp and var/tmp).  A new store is made 0700; an existing one
open to others is made private with a warning; a store that belongs to
another user is refused, untouched.  Runs in every identity mode."""
import os
import stat
import subprocess
from pathlib import Path

from conftest import imgbuild


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
