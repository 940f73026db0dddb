"""Helpers for the registry e2e tests: extra docker-registry instances
(with access logs, TLS, client certificates), their access logs, and
copying the test base image into them with skopeo."""
import os
import re
import subprocess
from pathlib import Path

from conftest import ROOT, cache_dir, sh  # noqa: F401 (cache_dir: regutil's users)

REGISTRY_SH = ROOT / "tests/lib/registry.sh"
ACCESS = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3}) ')


def base_layout():
    """The OCI layout tests/lib/base-image.sh made (the base_image fixture)."""
    return f"oci:{cache_dir() / 'bookworm-oci'}:bookworm"


class Registry:
    """docker-registry on 127.0.0.1; `env` as tests/lib/registry.sh reads it."""

    def __init__(self, d, **env):
        self.dir = Path(d)
        e = dict(os.environ)
        e.update({k: str(v) for k, v in env.items()})
        e.setdefault("REGISTRY_ACCESSLOG", "1")
        self.port = sh("bash", REGISTRY_SH, "start", self.dir, env=e).stdout.strip()
        self.mark()

    def stop(self):
        subprocess.run(["bash", str(REGISTRY_SH), "stop", str(self.dir)])

    def mark(self):
        """Later calls of requests() see only what happens from now on."""
        self.offset = (self.dir / "log").stat().st_size

    def requests(self):
        """(method, uri, status) of each request since mark()."""
        with open(self.dir / "log", "rb") as f:
            f.seek(self.offset)
            text = f.read().decode(errors="replace")
        return [(m.group(1), m.group(2), int(m.group(3))) for m in ACCESS.finditer(text)]


def copy_base(dest, *skopeo_args):
    """Copy the base image (OCI, gzip layer) to docker://dest with skopeo."""
    sh("skopeo", "copy", "--quiet", *skopeo_args, base_layout(), f"docker://{dest}")
