#!/usr/bin/python3
"""Result writer of tests/bench/pull-unpack.sh: reads RESULTS_DIR/raw.tsv,
meta.tsv, images.tsv and commands.tsv and prints Markdown: the machine,
the images, one table row per tool, image and filesystem (median, min and
max wall seconds over the successful runs, the largest peak RSS of those
runs, and the ratio of the tool's median to imgbuild's on the same image
and filesystem: above 1 means imgbuild was faster), then the commands.

    report.py RESULTS_DIR
"""
import collections
import statistics
import sys


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
    print("imgbuild: %s, mode `%s`." % (meta.get("imgbuild", "?"), meta.get("imgbuild_mode", "?")))
    print("Peers: " + "; ".join(("ch-image " if k == "ch-image" else "") + meta[k] for k in ("skopeo", "umoci", "podman", "ch-image", "curl", "gzip", "pigz", "tar") if k in meta) + ".")
    print()
    print("| image | reference | layers | compressed MiB |")
    print("| --- | --- | ---: | ---: |")
    for image, ref, layers, size in rows(out + "/images.tsv"):
        print("| %s | `%s` | %s | %.1f |" % (image, ref, layers, int(size) / 2**20))
    print()
    print("| tool | image | fs | runs | median s | min s | max s | peak RSS MiB | ratio vs imgbuild |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    med = {}
    for key, vals in runs.items():
        if vals:
            med[key] = statistics.median(v[0] for v in vals)
    for key, vals in runs.items():
        image, fs, tool = key
        fsname = "%s (%s)" % (fs, fstype.get(fs, "?"))
        note = " (%d of %d runs failed)" % (failed[key], failed[key] + len(vals)) if failed[key] else ""
        if not vals:
            print("| %s | %s | %s | 0 | failed%s | | | | |" % (tool, image, fsname, note))
            continue
        walls = [v[0] for v in vals]
        base = med.get((image, fs, "imgbuild"))
        ratio = "%.2f" % (med[key] / base) if base else "–"
        print("| %s | %s | %s | %d | %.2f%s | %.2f | %.2f | %.0f | %s |" % (
            tool, image, fsname, len(vals), med[key], note, min(walls), max(walls),
            max(v[1] for v in vals) / 1024, ratio))
    print()
    print("Peak RSS: the largest over the runs of `/usr/bin/time`'s maximum resident set;")
    print("for a command chain (`a && b`) that is the larger of the two, for curl-* the")
    print("sum of curl, the inflater and tar (which run at once), largest over the layers.")
    print()
    print("Commands (W: the run's empty work directory on the filesystem measured):")
    print()
    for tool, image, cmd in rows(out + "/commands.tsv"):
        print("- %s, %s: `%s`" % (tool, image, cmd))


if __name__ == "__main__":
    main(sys.argv[1])
