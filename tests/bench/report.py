#!/usr/bin/python3
"""Result writer of tests/bench/pull-unpack.sh and tests/bench/layers.sh:
reads RESULTS_DIR/raw.tsv, meta.tsv, images.tsv (if there) and
commands.tsv and prints Markdown: the machine, the images, one table row
per tool, image (for layers.sh: the part, unpack or write) and filesystem
(median, min and max wall seconds over the successful runs, the largest
peak RSS of those runs, and the ratio of the tool's median to imgbuild's
on the same image and filesystem: above 1 means imgbuild was faster), then
the commands.

With "ratio_same_compression" in meta.tsv (layers.sh) a second ratio
compares each tool with imgbuild using the same compression, named by the
tool's suffix: -gzip and -pigz with "imgbuild", -zstd with
"imgbuild-zstd", -none with "imgbuild-none". With notes.md in
RESULTS_DIR, its text replaces the footnote on peak RSS.

    report.py RESULTS_DIR
"""
import collections
import os
import statistics
import sys


def same_compression_base(tool):
    """The imgbuild row a tool compares with at equal compression, or None."""
    name = tool.split(":")[0]
    for suffix, base in (("-gzip", "imgbuild"), ("-pigz", "imgbuild"),
                         ("-zstd", "imgbuild-zstd"), ("-none", "imgbuild-none")):
        if name.endswith(suffix):
            return base
    if name.startswith("imgbuild"):
        return name
    return None


def rows(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def main(out):
    meta = collections.OrderedDict()
    fstype = {}
    for r in rows(out + "/meta.tsv"):
        if r[0] == "fs":
            fstype[r[1]] = r[2]
        else:
            meta[r[0]] = "\t".join(r[1:])
    raw = rows(out + "/raw.tsv")[1:]
    runs = collections.OrderedDict()
    failed = collections.Counter()
    for tool, image, fs, _run, wall, rss, status in raw:
        key = (image, fs, tool)
        runs.setdefault(key, [])
        if status == "ok":
            runs[key].append((float(wall), int(rss)))
        else:
            failed[key] += 1

    print("Machine: %s, %s, %s." % (meta.get("cpu", "?"), meta.get("memory", "?"), meta.get("kernel", "?")))
    print("Run: %s, %s s in all; load average %s at the start, %s at the end." % (
        meta.get("date", "?"), meta.get("total_s", "?"),
        meta.get("loadavg_start", "?"), meta.get("loadavg_end", "?")))
    if "imgbuild_mode" in meta:
        print("imgbuild: %s, mode `%s`." % (meta.get("imgbuild", "?"), meta["imgbuild_mode"]))
    else:
        print("imgbuild: %s." % meta.get("imgbuild", "?"))
    print("Peers: " + "; ".join(("ch-image " if k == "ch-image" else "") + meta[k] for k in ("skopeo", "umoci", "podman", "buildah", "ch-image", "curl", "gzip", "pigz", "zstd", "tar") if k in meta) + ".")
    for k, what in (("rounds", "Rounds"), ("unpack_image", "Unpack: image"), ("write_tree", "Write: tree")):
        if k in meta:
            print("%s: %s." % (what, meta[k].replace("\t", " ")))
    print()
    if os.path.exists(out + "/images.tsv"):
        print("| image | reference | layers | compressed MiB |")
        print("| --- | --- | ---: | ---: |")
        for image, ref, layers, size in rows(out + "/images.tsv"):
            print("| %s | `%s` | %s | %.1f |" % (image, ref, layers, int(size) / 2**20))
        print()
    same = "ratio_same_compression" in meta
    image_col = "part" if same else "image"
    print("| tool | %s | fs | runs | median s | min s | max s | peak RSS MiB | ratio vs imgbuild |%s"
          % (image_col, " ratio vs imgbuild, same compression |" if same else ""))
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |%s" % (" ---: |" if same else ""))
    med = {}
    for key, vals in runs.items():
        if vals:
            med[key] = statistics.median(v[0] for v in vals)
    for key, vals in runs.items():
        image, fs, tool = key
        fsname = "%s (%s)" % (fs, fstype.get(fs, "?"))
        note = " (%d of %d runs failed)" % (failed[key], failed[key] + len(vals)) if failed[key] else ""
        if not vals:
            print("| %s | %s | %s | 0 | failed%s | | | | |%s" % (tool, image, fsname, note, " |" if same else ""))
            continue
        walls = [v[0] for v in vals]
        base = med.get((image, fs, "imgbuild"))
        ratio = "%.2f" % (med[key] / base) if base else "–"
        rss = max(v[1] for v in vals)
        extra = ""
        if same:
            b2 = same_compression_base(tool)
            b2 = med.get((image, fs, b2)) if b2 else None
            extra = " %s |" % ("%.2f" % (med[key] / b2) if b2 else "–")
        print("| %s | %s | %s | %d | %.2f%s | %.2f | %.2f | %s | %s |%s" % (
            tool, image, fsname, len(vals), med[key], note, min(walls), max(walls),
            "%.0f" % (rss / 1024) if rss else "–", ratio, extra))
    print()
    if os.path.exists(out + "/notes.md"):
        with open(out + "/notes.md") as f:
            sys.stdout.write(f.read())
    else:
        print("Peak RSS: the largest over the runs of `/usr/bin/time`'s maximum resident set;")
        print("for a command chain (`a && b`) that is the larger of the two, for curl-* the")
        print("sum of curl, the inflater and tar (which run at once), largest over the layers.")
    print()
    if same:
        print("Commands (W: the run's empty work directory, IN: the inputs made once per run,")
        print("both on the filesystem measured; a \"(setup)\" command runs untimed just before):")
    else:
        print("Commands (W: the run's empty work directory on the filesystem measured):")
    print()
    for tool, image, cmd in rows(out + "/commands.tsv"):
        print("- %s, %s: `%s`" % (tool, image, cmd))


if __name__ == "__main__":
    main(sys.argv[1])
