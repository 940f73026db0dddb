"""ibtorch_ext: imgbuild's example PyTorch extension.

    import torch, ibtorch_ext
    ibtorch_ext.scaled_add(a, b, 0.5)   # a + 0.5 * b
    ibtorch_ext.row_softmax(x)          # softmax over the rows of a 2-D tensor

The operators live in the library _C (loaded into torch's dispatcher, as
torch.ops.ibtorch_ext.*); it links the libtorch of the torch imported here."""
import importlib.machinery
import os

import torch

from ._build_info import CUDA_VERSION, TORCH_VERSION, WITH_CUDA  # noqa: F401

_here = os.path.dirname(os.path.abspath(__file__))
for _suffix in importlib.machinery.EXTENSION_SUFFIXES:
    _lib = os.path.join(_here, "_C" + _suffix)
    if os.path.exists(_lib):
        torch.ops.load_library(_lib)
        break
else:
    raise ImportError(f"ibtorch_ext: no _C library in {_here}")

__version__ = "0.1.0"


def scaled_add(a, b, alpha=1.0):
    """a + alpha * b (float32 tensors of one shape, CPU or CUDA)."""
    return torch.ops.ibtorch_ext.scaled_add(a, b, float(alpha))


def row_softmax(x):
    """Softmax over the last dimension of a 2-D float32 tensor."""
    return torch.ops.ibtorch_ext.row_softmax(x)
