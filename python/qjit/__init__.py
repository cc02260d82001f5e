"""qjit from Python: its ops on PyTorch tensors through libqjit_runtime.so
(ctypes over the C API, no compiled extension), `qjit.nn` modules, tuning and
checkpoint repacking through the `qjit` command, and a safetensors reader.

    import torch, qjit
    y = qjit.wq_gemm(x, qweight, scales, zeros, g=128)     # on torch.cuda.current_stream()

`import qjit` needs neither torch nor the library: torch is imported by the
ops and qjit.nn, the library is loaded by the first op (see
qjit._lib.find_library for where it is looked for). Importing qjit.nn or
qjit.custom_ops registers the ops as torch.ops.qjit.* for torch.compile.
"""
from . import awq, conv, safetensors, w8a8, wq
from ._cli import import_shipped, repack_checkpoint, tune
from ._lib import QjitArgumentError, QjitError, find_cli, find_library, preload, set_cache_path
from .ops import awq_dequant, fp_lut, fused_ffn, gru_quant, qconv2d, w8a8_gemm, wq_gemm

__version__ = "0.1.0"

__all__ = ["QjitError", "QjitArgumentError", "wq_gemm", "awq_dequant", "fused_ffn", "fp_lut", "gru_quant", "w8a8_gemm", "qconv2d", "tune", "import_shipped",
           "repack_checkpoint", "set_cache_path", "preload", "find_library", "find_cli", "safetensors", "awq", "w8a8", "wq", "conv",
           "nn", "custom_ops"]


def __getattr__(name):
    # qjit.nn needs torch, and qjit.custom_ops imports it (registering torch.ops.qjit): imported on first use, so
    # `import qjit` works without torch and does not pay for importing it.
    if name in ("nn", "custom_ops"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'qjit' has no attribute %r" % name)
