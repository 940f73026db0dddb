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


FLOOR_PARTS = ("floor-download", "floor-inflate", "floor-untar")


def cpu_medians(out):
    """Median CPU seconds (user + system) per (image, fs, tool) from
    cpu.tsv, where the harness wrote it."""
    path = out + "/cpu.tsv"
    if not os.path.exists(path):
        return {}
    got = collections.defaultdict(list)
    for r in rows(path):
        tool, image, fs, cpu = r[:4]
        got[(image, fs, tool)].append(float(cpu))
    return {k: statistics.median(v) for k, v in got.items()}


def floor_table(runs, med, unpacked, fstype, cpu=None, cores=0):
    """imgbuild against the floor (tests/bench/floor.sh): the largest of
    the three parts' medians, which a perfect pipeline would overlap; and
    its time and peak RSS per GiB unpacked, to see them against size."""
    keys = sorted({(image, fs) for image, fs, tool in runs if tool == "imgbuild"},
                  key=lambda k: (unpacked.get(k[0], (0, 0))[0], k[1]))
    lines = []
    for image, fs in keys:
        parts = [(med[(image, fs, p)], p) for p in FLOOR_PARTS if (image, fs, p) in med]
        if (image, fs, "imgbuild") not in med or len(parts) != len(FLOOR_PARTS):
            continue
        floor, part = max(parts)
        t = med[(image, fs, "imgbuild")]
        rss = max(v[1] for v in runs[(image, fs, "imgbuild")])
        size = unpacked.get(image, (0, 0))[0] / 2**30
        per = "%.2f" % (t / size) if size else "–"
        # the CPU floor: the parts' CPU seconds shared by the cores
        cfloor = "–"
        if cpu and cores and all((image, fs, p) in cpu for p in FLOOR_PARTS):
            c = max(floor, sum(cpu[(image, fs, p)] for p in FLOOR_PARTS) / cores)
            cfloor = "%.2f (**%.2f**)" % (c, t / c)
        icpu = "%.2f" % cpu[(image, fs, "imgbuild")] if cpu and (image, fs, "imgbuild") in cpu else "–"
        lines.append("| %s | %s (%s) | %.2f | %s | %.2f (%s) | **%.2f** | %s | %s | %.0f |" % (
            image, fs, fstype.get(fs, "?"), size, per, floor, part[len("floor-"):], t / floor,
            cfloor, icpu, rss / 1024))
    if not lines:
        return
    print("imgbuild against the floor: the largest of the floor parts' medians")
    print("(download, inflate, untar: a perfect pipeline overlaps them); the CPU")
    print("floor: the larger of that and the parts' CPU seconds (user + system)")
    print("over the %s cores, which they share when they overlap." % (cores or "?"))
    print()
    print("| image | fs | unpacked GiB | imgbuild s per GiB | floor s (part) | imgbuild / floor | CPU floor s (imgbuild / it) | imgbuild CPU s | imgbuild peak RSS MiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for line in lines:
        print(line)
    print()


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
    unpacked = {}
    if os.path.exists(out + "/images.tsv"):
        print("| image | reference | layers | compressed MiB | unpacked MiB | entries |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for r in rows(out + "/images.tsv"):
            image, ref, layers, size = r[:4]
            if len(r) >= 6:
                unpacked[image] = (int(r[4]), int(r[5]))
            u, n = ("%.1f" % (int(r[4]) / 2**20), r[5]) if len(r) >= 6 else ("–", "–")
            print("| %s | `%s` | %s | %.1f | %s | %s |" % (image, ref, layers, int(size) / 2**20, u, n))
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
    cores = 0
    if "cpu" in meta:
        try:
            cores = int(meta["cpu"].rsplit(",", 1)[1].split()[0])
        except (IndexError, ValueError):
            cores = 0
    floor_table(runs, med, unpacked, fstype, cpu_medians(out), cores)
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
