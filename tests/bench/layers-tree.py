#!/usr/bin/python3
"""Tree checks of tests/bench/layers.sh, so that a broken tool is not
taken for a fast one.

    layers-tree.py expect APPLIED RAW TAR...
        From an image's uncompressed layer tars, in order, writes two
        listings: APPLIED, the tree an OCI unpack leaves (whiteouts and
        opaque whiteouts applied: imgbuild, umoci), and RAW, the tree that
        `tar -x` of each layer in turn leaves (whiteout files written as
        plain files, nothing removed).
    layers-tree.py list DIR OUT
        Writes DIR's listing.
    layers-tree.py layer-check LISTING < TAR
        Compares the layer tar on stdin (uncompressed) with a tree's
        listing, leaving out the mount points dev, proc and sys (a layer
        writer may skip them); prints the entry count, or the first
        differences and exits 1.
    layers-tree.py check DIR LISTING
        Compares DIR with a listing; prints the entry count, or the first
        differences and exits 1.

A listing has one line per entry, sorted: "f PATH SIZE" (regular file,
hard links included), "d PATH", "l PATH -> TARGET", "o PATH" (anything
else). Everything below dev/ is left out: an unprivileged tool cannot make
device nodes, and each skips them its own way.
"""
import os
import stat
import sys
import tarfile

WH = ".wh."
OPQ = ".wh..wh..opq"


def norm(name):
    name = name.lstrip("/")
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    return "" if name == "." else name


def skipped(path):
    return path == "" or path.startswith("dev/")


def line(path, kind, extra):
    if kind == "f":
        return "f %s %d" % (path, extra)
    if kind == "l":
        return "l %s -> %s" % (path, extra)
    return "%s %s" % (kind, path)


def entry_of(ti, state):
    """(kind, extra) of a tar member; a hard link takes its target's size."""
    if ti.isreg():
        return ("f", ti.size)
    if ti.islnk():
        tgt = state.get(norm(ti.linkname))
        return ("f", tgt[1] if tgt and tgt[0] == "f" else 0)
    if ti.isdir():
        return ("d", None)
    if ti.issym():
        return ("l", ti.linkname)
    return ("o", None)


def remove_tree(state, path):
    state.pop(path, None)
    prefix = path + "/"
    for k in [k for k in state if k.startswith(prefix)]:
        del state[k]


def expect(applied_out, raw_out, tars):
    applied, raw = {}, {}
    for t in tars:
        with tarfile.open(t, "r:") as tf:
            members = [(norm(ti.name), ti) for ti in tf]
        # OCI: whiteouts hide what lower layers hold, before this layer's entries.
        for path, _ti in members:
            base = os.path.basename(path)
            parent = os.path.dirname(path)
            if base == OPQ:
                prefix = parent + "/" if parent else ""
                for k in [k for k in applied if k.startswith(prefix) and k != parent]:
                    del applied[k]
            elif base.startswith(WH):
                remove_tree(applied, os.path.join(parent, base[len(WH):]))
        for path, ti in members:
            if path == "":
                continue
            base = os.path.basename(path)
            raw[path] = entry_of(ti, raw)
            if not base.startswith(WH):
                applied[path] = entry_of(ti, applied)
    for out, state in ((applied_out, applied), (raw_out, raw)):
        with open(out, "w") as f:
            for path in sorted(state):
                if not skipped(path):
                    f.write(line(path, *state[path]) + "\n")


def listing(top):
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        rel = os.path.relpath(dirpath, top)
        rel = "" if rel == "." else rel + "/"
        for name in dirnames + filenames:
            path = rel + name
            if skipped(path):
                continue
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                out.append(line(path, "f", st.st_size))
            elif stat.S_ISDIR(st.st_mode):
                out.append(line(path, "d", None))
            elif stat.S_ISLNK(st.st_mode):
                out.append(line(path, "l", os.readlink(os.path.join(dirpath, name))))
            else:
                out.append(line(path, "o", None))
    out.sort()
    return out


def layer_check(listing_file):
    mounts = ("dev", "proc", "sys")

    def keep(path):
        return path != "" and path.split("/")[0] not in mounts

    state, entries = {}, 0
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tf:
        for ti in tf:
            entries += 1
            path = norm(ti.name)
            if keep(path):
                state[path] = entry_of(ti, state)
    got = sorted(line(p, *state[p]) for p in state)
    with open(listing_file) as f:
        want = [l.rstrip("\n") for l in f if keep(l.split(" ")[1].rstrip("\n"))]
    return compare(got, want, "layer of %d tar entries" % entries)


def compare(got, want, what):
    got, want = sorted(got), sorted(want)
    if got == want:
        print("%s: %d entries, as expected" % (what, len(got)))
        return 0
    gs, ws = set(got), set(want)
    missing = sorted(ws - gs)
    extra = sorted(gs - ws)
    print("%s differs: %d entries, %d expected; %d missing, %d unexpected" % (
        what, len(got), len(want), len(missing), len(extra)))
    for l in missing[:5]:
        print("  missing:    " + l)
    for l in extra[:5]:
        print("  unexpected: " + l)
    return 1


def check(top, listing_file):
    if not os.path.isdir(top):
        print("no tree at %s" % top)
        return 1
    with open(listing_file) as f:
        want = [l.rstrip("\n") for l in f]
    return compare(listing(top), want, "tree")


def main(argv):
    if len(argv) >= 5 and argv[1] == "expect":
        expect(argv[2], argv[3], argv[4:])
    elif len(argv) == 4 and argv[1] == "list":
        with open(argv[3], "w") as f:
            f.writelines(l + "\n" for l in listing(argv[2]))
    elif len(argv) == 3 and argv[1] == "layer-check":
        return layer_check(argv[2])
    elif len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
