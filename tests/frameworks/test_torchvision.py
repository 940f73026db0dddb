"""make e2e-frameworks: THE REAL TORCHVISION BUILD.  recipes/torch110.recipe
runs with stand-in build args only where its defaults need the internet or
a CUDA toolkit: the bases (a Debian bookworm stand-in with Debian's torch
1.13.1, CPU, for the CUDA 9.0 devel and client images), the PyTorch
source (a stand-in whose wheel holds only metadata: Debian's torch is the
one imported; building PyTorch is hours), FORCE_CUDA=0 (no nvcc here),
and the versions (torch 1.13.1, torchvision v0.14.1, which targets it).
The torchvision steps are the recipe's own, unchanged: torchvision
0.14.1's real source (Debian's copy of the upstream tarball, sha256
checked, as a git repository served on 127.0.0.1) is cloned at its tag,
`setup.py build` compiles its C++ operators (nms, roi_align,
deform_conv2d, ...) against Debian's libtorch headers and its image I/O
against libjpeg and libpng, `setup.py bdist_wheel` writes the wheel, the
OUTPUT verifies, audits and repairs it into ./dist (libjpeg and libpng
grafted, libtorch and libc10 never), and the client stage gets the same
repaired bytes under /opt (COPY --repair) and pip-installs them.  Checked
inside the client image: the operators against pure-Python references on
random input, a resnet18 forward pass, decode_jpeg of a JPEG made there,
the wheel under /opt byte for byte the one in ./dist.  Not in `make
test`: a pass compiles for minutes (tests/frameworks/run.sh)."""
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import e2e, CLIENT, PY_DIST

ROOT = e2e.ROOT
imgbuild = e2e.imgbuild

# In the client: torchvision's operators against references written here
# in plain Python, a model forward pass, the image decoders.
CHECK = r"""
import io, json, math, random
import numpy as np, torch, torchvision
from PIL import Image
from torchvision.ops import nms, roi_align, deform_conv2d
from torchvision.models import resnet18
torch.manual_seed(0); random.seed(0)
res = {"torch": torch.__version__, "torch_file": torch.__file__,
       "vision": torchvision.__version__, "vision_file": torchvision.__file__}
res["ops"] = [op for op in ("nms", "roi_align", "roi_pool", "ps_roi_align", "deform_conv2d")
              if hasattr(torch.ops.torchvision, op)]

def iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0])); ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

def nms_ref(boxes, scores, thr):
    keep = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        if all(iou(boxes[i], boxes[k]) <= thr for k in keep):
            keep.append(i)
    return keep

xy = torch.rand(300, 2) * 100
boxes = torch.cat([xy, xy + 1 + torch.rand(300, 2) * 40], dim=1)
scores = torch.rand(300)
res["nms"] = [nms(boxes, scores, t).tolist() == nms_ref(boxes.tolist(), scores.tolist(), t)
              for t in (0.3, 0.5, 0.7)]
res["nms_kept"] = len(nms(boxes, scores, 0.5))

def bilinear(img, y, x):
    H, W = len(img), len(img[0])
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= H - 1: yh = yl = H - 1; y = float(yl)
    else: yh = yl + 1
    if xl >= W - 1: xh = xl = W - 1; x = float(xl)
    else: xh = xl + 1
    ly, lx = y - yl, x - xl; hy, hx = 1 - ly, 1 - lx
    return hy * hx * img[yl][xl] + hy * lx * img[yl][xh] + ly * hx * img[yh][xl] + ly * lx * img[yh][xh]

def roi_align_ref(feat, rois, out, scale, sr, aligned):
    # feat: C x H x W lists; rois: [batch, x1, y1, x2, y2]; as Detectron's RoIAlign
    res = []
    off = 0.5 if aligned else 0.0
    for r in rois:
        sw, sh, ew, eh = r[1] * scale - off, r[2] * scale - off, r[3] * scale - off, r[4] * scale - off
        rw, rh = ew - sw, eh - sh
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / out, rw / out
        gh = sr if sr > 0 else math.ceil(rh / out); gw = sr if sr > 0 else math.ceil(rw / out)
        cnt = max(gh * gw, 1)
        res.append([[[sum(bilinear(ch, sh + ph * bh + (iy + 0.5) * bh / gh, sw + pw * bw + (ix + 0.5) * bw / gw)
                          for iy in range(gh) for ix in range(gw)) / cnt
                      for pw in range(out)] for ph in range(out)] for ch in feat])
    return res

feat = torch.randn(1, 3, 20, 24)
x1y1 = torch.rand(12, 2) * 30
rois = torch.cat([torch.zeros(12, 1), x1y1, x1y1 + 2 + torch.rand(12, 2) * 16], dim=1)
res["roi_align_diff"] = max(
    (roi_align(feat, rois, 4, spatial_scale=0.5, sampling_ratio=sr, aligned=al)
     - torch.tensor(roi_align_ref(feat[0].tolist(), rois.tolist(), 4, 0.5, sr, al))).abs().max().item()
    for sr in (2, 0) for al in (True, False))

# deform_conv2d with zero offsets is a plain convolution
inp, w = torch.randn(2, 4, 9, 11), torch.randn(6, 4, 3, 3)
off = torch.zeros(2, 2 * 3 * 3, 7, 9)
res["deform_diff"] = (deform_conv2d(inp, off, w) - torch.nn.functional.conv2d(inp, w)).abs().max().item()

m = resnet18(weights=None).eval()
with torch.no_grad():
    y = m(torch.randn(2, 3, 64, 64))
res["resnet"] = [list(y.shape), bool(torch.isfinite(y).all())]

# a JPEG made here (pillow, the system libjpeg), decoded by torchvision's
# own libjpeg (the one grafted into its wheel); a PNG round trip
a = np.zeros((30, 40, 3), dtype=np.uint8)
a[..., 0] = np.arange(40, dtype=np.uint8)[None, :] * 6
a[..., 1] = np.arange(30, dtype=np.uint8)[:, None] * 8
a[..., 2] = 200
buf = io.BytesIO(); Image.fromarray(a).save(buf, format="JPEG", quality=90)
data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
img = torchvision.io.decode_jpeg(data)
pil = torch.from_numpy(np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")).copy()).permute(2, 0, 1)
res["jpeg"] = [list(img.shape), (img.int() - pil.int()).abs().max().item()]
png = torchvision.io.encode_png(torch.from_numpy(a).permute(2, 0, 1).contiguous())
res["png_roundtrip"] = bool(torch.equal(torchvision.io.decode_png(png), torch.from_numpy(a).permute(2, 0, 1)))
import torchvision.io.image as tvimage
res["image_so"] = tvimage.__file__
print(json.dumps(res))
"""


def test_wheel_in_dist_repaired(built):
    names = sorted(p.name for p in (built["work"] / "dist").iterdir())
    assert names == ["torch-1.13.1-py3-none-any.whl", built["wheel"]], names
    log = built["build"].err + built["build"].out
    raw = f"torchvision-{built['version']}-cp311-cp311-linux_x86_64.whl"
    assert f"wheel {raw}: verified," in log, log
    assert f"wheel {raw}: grafting libjpeg.so.62 " in log and f"wheel {raw}: grafting libpng16.so.16 " in log
    assert f"repaired as {built['wheel']}; platform tag manylinux_2_34_x86_64" in log


def test_wheel_holds_the_compiled_operators_and_image_io(built, tmp_path):
    whl = built["work"] / "dist" / built["wheel"]
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        z.extract("torchvision/_C.so", tmp_path)
        z.extract("torchvision/image.so", tmp_path)
    libs = sorted(n.split("/")[1].split("-")[0] for n in names if n.startswith("torchvision.libs/"))
    assert libs == ["libjpeg", "libpng16"], libs  # grafted: nothing of torch, nothing else
    dyn = subprocess.run(["readelf", "-dW", tmp_path / "torchvision/image.so"],
                         capture_output=True, text=True, check=True).stdout
    needed = [l.split("[")[1].rstrip("]") for l in dyn.splitlines() if "(NEEDED)" in l]
    # image I/O: the grafted copies, renamed; libtorch and libc10 as they were
    assert any(n.startswith("libjpeg-") for n in needed) and any(n.startswith("libpng16-") for n in needed), needed
    assert "libc10.so.1.13" in needed and "libtorch_cpu.so.1.13" in needed, needed
    # the operators' CPU kernels, compiled from their sources (each
    # translation unit leaves its static initialiser in the symbol table)
    syms = subprocess.run(["nm", tmp_path / "torchvision/_C.so"],
                          capture_output=True, text=True, check=True).stdout.split()
    for unit in ("nms_kernel", "roi_align_kernel", "deform_conv2d_kernel", "ps_roi_pool_kernel"):
        assert f"_GLOBAL__sub_I_{unit}.cpp" in syms, unit


def test_client_checks(built):
    r = imgbuild("run", CLIENT, "--", "python3", "-c", CHECK, store=built["store"])
    assert r.rc == 0, r
    res = json.loads(r.out.strip().splitlines()[-1])
    # torch: Debian's, in its dist-packages; torchvision: the wheel's, in PY_DIST
    assert res["torch"].startswith("1.13.") and res["torch_file"] == "/usr/lib/python3/dist-packages/torch/__init__.py", res
    assert res["vision"] == built["version"] and res["vision_file"] == f"{PY_DIST}/torchvision/__init__.py", res
    assert res["ops"] == ["nms", "roi_align", "roi_pool", "ps_roi_align", "deform_conv2d"], res
    assert res["nms"] == [True, True, True] and 20 < res["nms_kept"] < 300, res
    assert res["roi_align_diff"] < 1e-4, res
    assert res["deform_diff"] < 1e-4, res
    assert res["resnet"] == [[2, 1000], True], res
    assert res["jpeg"][0] == [3, 30, 40] and res["jpeg"][1] <= 1, res
    assert res["png_roundtrip"] is True, res
    assert res["image_so"].startswith(f"{PY_DIST}/torchvision/"), res


def test_client_opt_holds_the_dist_wheel_bytes_and_orion_files(built):
    r = imgbuild("run", CLIENT, "--", "sh", "-c", "cd /opt && ls && sha256sum torchvision-*.whl",
                 store=built["store"])
    assert r.rc == 0, r
    lines = r.out.split()
    assert lines[:4] == ["install-client-9.0", "oriond", "torch-1.13.1-py3-none-any.whl", built["wheel"]], lines
    want = hashlib.sha256((built["work"] / "dist" / built["wheel"]).read_bytes()).hexdigest()
    assert lines[4] == want


def test_client_image_tagged_with_the_orion_name(built):
    names = e2e.stored_names(built["store"])
    assert CLIENT in names or any(n and n.endswith(CLIENT) for n in names), names
