"""The operator and TorchScript checks of tests/gpu/torch-ext-cuda.sh, run
inside the sandbox by the torch the extension was built against, with the
installed wheel first on sys.path (PYTHONPATH).

    python3 torch-ext-check.py ops  DEVICE SITE
    python3 torch-ext-check.py save DEVICE SITE FILE.pt
    python3 torch-ext-check.py load DEVICE SITE FILE.pt

DEVICE is cuda (the CUDA kernels of csrc/ops_cuda.cu, on GPU 0) or cpu (the
dry run: csrc/ops.cpp's kernels).  SITE is the directory the wheel was
installed into: ibtorch_ext must come from there.  `save` scripts a function
and a module calling torch.ops.ibtorch_ext.*, runs them, and saves them with
torch.jit.save beside their inputs and outputs (FILE.pt, FILE.fn.pt,
FILE.io.pt); `load`, in a fresh process, loads them back with torch.jit.load
and checks that they compute the same tensors.  Every check prints one line;
the exit status is the number of failed checks (0: all passed)."""
import math
import os
import sys
from typing import Tuple

import torch

failed = 0


def check(name, ok, detail="", quiet=False):
    """One line per check; quiet: a line only when it fails."""
    global failed
    if not ok or not quiet:
        print(f"  {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failed += 1
    return ok


def maxdiff(x, y):
    return (x.double() - y.double()).abs().max().item() if x.numel() else 0.0


def close(name, got, want, atol, rtol, dev):
    """got equals want within the tolerances (a line only when not); the
    largest difference"""
    same = got.shape == want.shape
    ok = (got.device.type == dev and got.dtype == torch.float32 and same
          and torch.allclose(got, want, atol=atol, rtol=rtol))
    d = maxdiff(got, want) if same else math.inf
    check(name, ok, f"{got.dtype} on {got.device}, max |diff| {d:.3g}" if same
          else f"shape {tuple(got.shape)}, expected {tuple(want.shape)}", quiet=True)
    return ok, d


def raises(name, fn, text):
    try:
        fn()
    except RuntimeError as e:
        msg = str(e).splitlines()[0]
        check(name, text in str(e), msg)
        return
    check(name, False, "no error raised")


def ops(dev, site):
    import ibtorch_ext

    print(f"  torch {torch.__version__} (CUDA {torch.version.cuda}) from {os.path.dirname(torch.__file__)}")
    print(f"  ibtorch_ext from {os.path.dirname(ibtorch_ext.__file__)}: built against torch "
          f"{ibtorch_ext.TORCH_VERSION}, CUDA {ibtorch_ext.CUDA_VERSION}, WITH_CUDA {ibtorch_ext.WITH_CUDA}")
    check("ibtorch_ext is the installed wheel's",
          os.path.realpath(ibtorch_ext.__file__).startswith(os.path.realpath(site) + os.sep))
    check("built against the torch imported", ibtorch_ext.TORCH_VERSION == torch.__version__)
    check(f"WITH_CUDA is {dev == 'cuda'}", ibtorch_ext.WITH_CUDA is (dev == "cuda"))
    if dev == "cuda":
        ok = torch.cuda.is_available()
        check("torch.cuda.is_available()", ok,
              f"{torch.cuda.device_count()} device(s), GPU 0: {torch.cuda.get_device_name(0)}, "
              f"capability {torch.cuda.get_device_capability(0)}" if ok else "")
        if not ok:
            return
    has = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    if has:
        for op in ("scaled_add", "row_softmax"):
            check(f"ibtorch_ext::{op} has a {dev.upper()} kernel",
                  has(f"ibtorch_ext::{op}", dev.upper()))
    schemas = [str(s) for op in ("scaled_add", "row_softmax")
               for s in torch._C._jit_get_schemas_for_operator("ibtorch_ext::" + op)]
    check("schemas", schemas == ["ibtorch_ext::scaled_add(Tensor a, Tensor b, float alpha) -> Tensor",
                                 "ibtorch_ext::row_softmax(Tensor x) -> Tensor"], str(schemas))

    t = lambda v: torch.tensor(v, device=dev)  # noqa: E731
    got = ibtorch_ext.scaled_add(t([1., 2., 3.]), t([10., 20., 30.]), 0.5)
    check("scaled_add fixed values", got.device.type == dev and got.tolist() == [6., 12., 18.], str(got.tolist()))
    got = ibtorch_ext.row_softmax(t([[0., math.log(3.)], [5., 5.]]))
    want = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    check("row_softmax fixed values", got.device.type == dev and torch.allclose(got.cpu(), want, atol=1e-6),
          str(got.tolist()))
    got = ibtorch_ext.row_softmax(t([[1000., 0., -1000.], [-1e30, -1e30, -1e30]]))
    check("row_softmax of extreme values (max subtracted: no inf/nan)",
          bool(torch.isfinite(got).all()) and torch.allclose(
              got.cpu(), torch.tensor([[1., 0., 0.], [1 / 3, 1 / 3, 1 / 3]]), atol=1e-6), str(got.tolist()))

    torch.manual_seed(0)
    # rows x columns: odd widths, one column, wider than a block (256
    # threads), many rows (one block each), and an empty tensor
    for rows, cols in ((64, 33), (17, 129), (1000, 257), (3, 1), (2, 4097), (5000, 65), (0, 33)):
        a = torch.randn(rows, cols, device=dev)
        b = torch.randn(rows, cols, device=dev)
        x = torch.randn(rows, cols, device=dev) * 20
        at = torch.randn(cols, rows, device=dev).t()  # transposed: not contiguous
        bt = torch.randn(cols, rows, device=dev).t()
        xt = (torch.randn(cols, rows, device=dev) * 20).t()
        xs = (torch.randn(rows, 2 * cols, device=dev) * 20)[:, ::2]  # every other column
        shape = f"{rows}x{cols}"
        res = [close(f"scaled_add {shape} contiguous", ibtorch_ext.scaled_add(a, b, -1.75),
                     torch.add(a, b, alpha=-1.75), 1e-5, 1e-5, dev),
               close(f"scaled_add {shape} transposed", ibtorch_ext.scaled_add(at, bt, 2.0),
                     torch.add(at, bt, alpha=2.0), 1e-5, 1e-5, dev),
               close(f"scaled_add {shape} contiguous + transposed", ibtorch_ext.scaled_add(a, bt, 0.5),
                     torch.add(a, bt, alpha=0.5), 1e-5, 1e-5, dev)]
        sums_ok = True
        for name, v in (("contiguous", x), ("transposed", xt), ("strided columns", xs)):
            got = ibtorch_ext.row_softmax(v)
            res.append(close(f"row_softmax {shape} {name}", got, torch.softmax(v, dim=1), 1e-6, 1e-5, dev))
            if rows:
                sums = got.sum(dim=1)
                sums_ok &= check(f"row_softmax {shape} {name}: rows sum to 1",
                                 torch.allclose(sums, torch.ones_like(sums), atol=1e-5), quiet=True)
        if all(ok for ok, _ in res) and sums_ok:
            print(f"  ok   {shape} against torch.add / torch.softmax (contiguous, transposed, mixed / strided "
                  f"columns): max |diff| scaled_add {max(d for _, d in res[:3]):.3g}, "
                  f"row_softmax {max(d for _, d in res[3:]):.3g}{', rows sum to 1' if rows else ''}")
    if dev == "cuda":
        torch.cuda.synchronize()
        check("no CUDA error pending after the kernels", True)

    raises("scaled_add refuses different shapes",
           lambda: ibtorch_ext.scaled_add(torch.zeros(4, 3, device=dev), torch.zeros(3, device=dev), 1.0),
           "shapes differ")
    raises("scaled_add refuses float64",
           lambda: ibtorch_ext.scaled_add(torch.zeros(3, device=dev, dtype=torch.float64),
                                          torch.zeros(3, device=dev, dtype=torch.float64), 1.0),
           "float32 tensors only")
    raises("row_softmax refuses a 1-D tensor", lambda: ibtorch_ext.row_softmax(torch.zeros(3, device=dev)),
           "a 2-D tensor expected")
    if dev == "cuda":
        raises("scaled_add refuses a CUDA and a CPU tensor",
               lambda: ibtorch_ext.scaled_add(torch.zeros(3, device=dev), torch.zeros(3), 1.0),
               "tensors on different devices")


def both(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, alpha: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """scripted (torch.jit.script) only once ibtorch_ext registered its operators"""
    return torch.ops.ibtorch_ext.scaled_add(a, b, alpha), torch.ops.ibtorch_ext.row_softmax(x)


class Both(torch.nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return both(a, b, x, self.alpha)


def save(dev, path):
    import ibtorch_ext  # noqa: F401  (registers torch.ops.ibtorch_ext.*)

    torch.manual_seed(1)
    a = torch.randn(33, 129, device=dev)
    b = torch.randn(129, 33, device=dev).t()
    x = torch.randn(129, 33, device=dev).t() * 10
    fn = torch.jit.script(both)
    fn_out = fn(a, b, x, 0.25)
    m = torch.jit.script(Both(0.25))
    m_out = m(a, b, x)
    check("scripted function equals the operators",
          torch.equal(fn_out[0], torch.ops.ibtorch_ext.scaled_add(a, b, 0.25))
          and torch.equal(fn_out[1], torch.ops.ibtorch_ext.row_softmax(x)))
    check("scripted module equals the scripted function",
          torch.equal(m_out[0], fn_out[0]) and torch.equal(m_out[1], fn_out[1]))
    check("the scripted code calls the extension's operators",
          "ibtorch_ext.scaled_add" in fn.code and "ibtorch_ext.row_softmax" in fn.code,
          " ".join(l.strip() for l in fn.code.splitlines() if "ops." in l))
    torch.jit.save(fn, path + ".fn.pt")
    torch.jit.save(m, path)
    torch.save({"a": a.cpu(), "b": b.cpu(), "x": x.cpu(), "fn": [t.cpu() for t in fn_out],
                "m": [t.cpu() for t in m_out]}, path + ".io.pt")
    check("torch.jit.save", all(os.path.getsize(p) > 0 for p in (path, path + ".fn.pt")),
          f"{os.path.basename(path)} {os.path.getsize(path)} bytes, "
          f"{os.path.basename(path)}.fn.pt {os.path.getsize(path + '.fn.pt')} bytes")


def load(dev, path):
    import ibtorch_ext  # noqa: F401  (the saved code names torch.ops.ibtorch_ext.*)

    io = torch.load(path + ".io.pt")
    a, b, x = (io[k].to(dev) for k in "abx")
    # the inputs as they were (strides and all): transposed views again
    b, x = b.t().contiguous().t(), x.t().contiguous().t()
    for name, file, want in (("function", path + ".fn.pt", io["fn"]), ("module", path, io["m"])):
        m = torch.jit.load(file, map_location=dev)
        got = m(a, b, x, 0.25) if name == "function" else m(a, b, x)
        check(f"torch.jit.load'ed {name}: results equal what was saved",
              all(g.device.type == dev and torch.equal(g.cpu(), w) for g, w in zip(got, want)),
              f"max |diff| {max(maxdiff(g.cpu(), w) for g, w in zip(got, want)):.3g}")
        check(f"torch.jit.load'ed {name}: equals the operators now",
              torch.equal(got[0], torch.ops.ibtorch_ext.scaled_add(a, b, 0.25))
              and torch.equal(got[1], torch.ops.ibtorch_ext.row_softmax(x)))


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("ops", "save", "load") or sys.argv[2] not in ("cuda", "cpu"):
        sys.exit(__doc__)
    mode, dev, site = sys.argv[1:4]
    if mode == "ops":
        ops(dev, site)
    elif len(sys.argv) != 5:
        sys.exit(__doc__)
    elif mode == "save":
        save(dev, sys.argv[4])
    else:
        load(dev, sys.argv[4])
    print(f"  {mode}: {'all passed' if not failed else f'{failed} FAILED'}")
    sys.exit(min(failed, 100))


if __name__ == "__main__":
    main()
