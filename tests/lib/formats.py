#!/usr/bin/env python3
"""Push test images in every format the registry client reads.

    formats.py REGISTRY_HOST:PORT   -> prints a JSON object naming them

Made with real tools from the cached Debian base layout that base-image.sh
leaves in $IMGBUILD_TEST_CACHE/bookworm-oci (run that first):

  formats/debian:oci-gzip   OCI manifest, gzip layer       (skopeo --format oci)
  formats/debian:oci-zstd   OCI manifest, zstd layer       (skopeo --dest-compress-format zstd
                            into a layout, then pushed by skopeo)
  formats/multi:1           OCI index: linux/amd64 (the Debian image), linux/arm64/v8 and
                            linux/arm/v7 (tiny synthetic images made by umoci, never run),
                            and a BuildKit-style attestation manifest for unknown/unknown
                            (skopeo copy --all)
  formats/multi:nested      an index whose only entry is the index above (written
                            here and PUT over HTTP, as no tool makes nested indexes)
  faults/small:1            a one-layer amd64 image with 2 MiB of incompressible
                            data, for the fault-injection tests (umoci + skopeo)

The Docker schema2 gzip image is base-image.sh's debian:bookworm.
"""
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def run(*args):
    subprocess.run(list(map(str, args)), check=True, stdout=sys.stderr)


def tar_bytes(files):
    """A reproducible tar of {path: bytes}."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        dirs = set()
        for path in sorted(files):
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    ti = tarfile.TarInfo(d)
                    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1700000000
                    t.addfile(ti)
            ti = tarfile.TarInfo(path)
            ti.size, ti.mode, ti.mtime = len(files[path]), 0o644, 1700000000
            t.addfile(ti, io.BytesIO(files[path]))
    return buf.getvalue()


def descriptor(layout, tag):
    index = json.loads((layout / "index.json").read_text())
    for d in index["manifests"]:
        if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            return {"mediaType": d["mediaType"], "digest": d["digest"], "size": d["size"]}
    raise SystemExit(f"formats.py: no {tag} in {layout}")


def put_blob(layout, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256" / digest[7:]).write_bytes(data)
    return digest


def add_tag(layout, tag, desc):
    index = json.loads((layout / "index.json").read_text())
    d = dict(desc)
    d["annotations"] = {"org.opencontainers.image.ref.name": tag}
    index["manifests"].append(d)
    (layout / "index.json").write_text(json.dumps(index))


def synthetic(layout, tmp, tag, files, os_, arch):
    """A one-layer image made by umoci from a tar of `files`."""
    tar = tmp / f"{tag}.tar"
    tar.write_bytes(tar_bytes(files))
    run("umoci", "new", "--image", f"{layout}:{tag}")
    run("umoci", "raw", "add-layer", "--image", f"{layout}:{tag}", tar)
    run("umoci", "config", "--image", f"{layout}:{tag}", "--os", os_, "--architecture", arch,
        "--config.cmd", "/bin/true")
    return descriptor(layout, tag)


def registry_get(registry, path, accept):
    req = urllib.request.Request(f"http://{registry}{path}", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def main():
    registry = sys.argv[1]
    cache = Path(os.environ.get("IMGBUILD_TEST_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "imgbuild-tests")
    base = cache / "bookworm-oci"
    if not (base / "index.json").is_file():
        raise SystemExit(f"formats.py: {base} missing; run tests/lib/base-image.sh first")
    skopeo = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
    out = {}

    run(*skopeo, "--format", "oci", f"oci:{base}:bookworm", f"docker://{registry}/formats/debian:oci-gzip")
    out["oci_gzip"] = f"{registry}/formats/debian:oci-gzip"

    with tempfile.TemporaryDirectory(prefix="imgbuild-formats.") as t:
        tmp = Path(t)
        # skopeo 1.9 pushing straight to the registry reuses the gzip blob
        # already there instead of recompressing: recompress into a fresh
        # layout first, then push that.
        run(*skopeo, "--format", "oci", "--dest-compress-format", "zstd", f"oci:{base}:bookworm",
            f"oci:{tmp}/zstd:bookworm")
        run(*skopeo, f"oci:{tmp}/zstd:bookworm", f"docker://{registry}/formats/debian:oci-zstd")
        out["oci_zstd"] = f"{registry}/formats/debian:oci-zstd"
        layout = tmp / "layout"
        run("umoci", "init", "--layout", layout)
        for blob in (base / "blobs/sha256").iterdir():
            try:
                os.link(blob, layout / "blobs/sha256" / blob.name)
            except OSError:  # another file system, or fs.protected_hardlinks for a user
                shutil.copy(blob, layout / "blobs/sha256" / blob.name)
        amd64 = descriptor(base, "bookworm")
        arm64 = synthetic(layout, tmp, "arm64", {"etc/platform": b"linux/arm64/v8\n"}, "linux", "arm64")
        armv7 = synthetic(layout, tmp, "armv7", {"etc/platform": b"linux/arm/v7\n"}, "linux", "arm")
        attest = synthetic(layout, tmp, "attest", {"attestation.json": b"{}\n"}, "unknown", "unknown")
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            dict(amd64, platform={"os": "linux", "architecture": "amd64"}),
            dict(arm64, platform={"os": "linux", "architecture": "arm64", "variant": "v8"}),
            dict(armv7, platform={"os": "linux", "architecture": "arm", "variant": "v7"}),
            dict(attest, platform={"os": "unknown", "architecture": "unknown"},
                 annotations={"vnd.docker.reference.type": "attestation-manifest",
                              "vnd.docker.reference.digest": amd64["digest"]}),
        ]}
        data = json.dumps(index, sort_keys=True).encode()
        add_tag(layout, "multi", {"mediaType": OCI_INDEX, "digest": put_blob(layout, data), "size": len(data)})
        run(*skopeo, "--all", f"oci:{layout}:multi", f"docker://{registry}/formats/multi:1")

        rng = random.Random(20240501)
        small = {"data/random.bin": bytes(rng.getrandbits(8) for _ in range(2 << 20)),
                 "etc/hello": b"hello from the fault tests\n"}
        d = synthetic(layout, tmp, "small", small, "linux", "amd64")
        m = json.loads((layout / "blobs/sha256" / d["digest"][7:]).read_bytes())
        out["small_layer"] = m["layers"][0]["digest"]
        out["small_config"] = m["config"]["digest"]
        run(*skopeo, "--format", "oci", f"oci:{layout}:small", f"docker://{registry}/faults/small:1")
        out["small"] = f"{registry}/faults/small:1"
        out["small_files"] = {p: hashlib.sha256(b).hexdigest() for p, b in small.items()}

    # What the registry serves (skopeo may have rewritten the index).
    raw = registry_get(registry, "/v2/formats/multi/manifests/1", OCI_INDEX)
    served = json.loads(raw)
    out["multi"] = f"{registry}/formats/multi:1"
    out["multi_digest"] = "sha256:" + hashlib.sha256(raw).hexdigest()
    out["multi_platforms"] = {
        "/".join(filter(None, [m["platform"]["os"], m["platform"]["architecture"],
                               m["platform"].get("variant")])): m["digest"]
        for m in served["manifests"]}

    nested = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_INDEX, "digest": out["multi_digest"], "size": len(raw)}]}).encode()
    req = urllib.request.Request(f"http://{registry}/v2/formats/multi/manifests/nested", data=nested,
                                 method="PUT", headers={"Content-Type": OCI_INDEX})
    urllib.request.urlopen(req, timeout=60).read()
    out["nested"] = f"{registry}/formats/multi:nested"
    out["nested_digest"] = "sha256:" + hashlib.sha256(nested).hexdigest()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
