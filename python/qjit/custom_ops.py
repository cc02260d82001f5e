"""qjit's ops as PyTorch custom ops, torch.ops.qjit.<op>, so that torch.compile,
torch.export and CUDA graphs see through them (no graph break).

Importing this module registers them (qjit.nn imports it) through
torch.library.custom_op and register_fake (torch 2.4 or newer). Without torch,
or with an older one, it imports all the same and registers nothing:
`unavailable` says why, and `ops.<name>` raises an AttributeError saying it.
`ops` is torch.ops.qjit when they are registered.

Each op has
- its real implementation: qjit.ops' function (the checks, the C call on the
  current stream of the tensors' device), registered for every device, so a
  CPU tensor is refused by qjit's checks with the eager message;
- its fake implementation: qjit.ops' checked path with fake=True, the same
  checks raising the same TypeError or ValueError naming the tensor, on
  FakeTensors or meta tensors; it gives the output's shape and dtype and
  launches nothing. x's leading sizes stay symbolic (a batch dimension
  compiled as dynamic is not fixed by it).

The ops are functional: each returns a new tensor and takes no `out=`. A
compiled graph allocates its outputs itself (inductor plans the buffers; under
CUDA graphs they come from the graph's pool), and a custom op may not return
an alias of an argument, so an `out=` form would need a second, mutating
schema that torch.compile functionalizes back into this one with a copy.
The eager functions (qjit.wq_gemm, ...) keep `out=`. They are for inference:
no autograd formula is registered, so compile under torch.no_grad() (or
inference_mode) when an input requires grad.

Signatures: qjit.ops' own, but that tensor arguments are positional (torch
refuses keyword-only tensors: wq_gemm's bias and residual, fused_ffn's scales
and zeros, w8a8_gemm's and qconv2d's bias come after the other tensors) and
that every argument has one type torch.library accepts:

  wq_gemm(x, qweight, scales, zeros=None, bias=None, residual=None, *, bits=4, g=128, zero="int", act="none")
  awq_dequant(qweight, qzeros, scales, *, layout="awq", symmetric=False, out_dtype=None)
  fused_ffn(x, w1, w3, scales1=None, zeros1=None, scales3=None, zeros3=None, *, bits=4, g=128, zero="int",
            act="silu")
  fp_lut(x, fn="silu", *, cuts=None, out_dtype=None)
  gru_quant(x, h0, W, R, bw, br, params, *, float_out=False) -> (y, y_float)
      params: the params document as JSON text (json.dumps of the dict, which
      keeps every value); y_float is an empty float32 [0] unless float_out.
  w8a8_gemm(x, wq, w_scale, w_offset=None, w_sum=None, bias=None, *, block=128, quant_a="offset", format=None,
            act="none")
  qconv2d(x, qweight, scales, offsets, bias=None, *, bits=4, block=32, kernel_size, stride, padding, dilation,
          layout="nchw", act="none")
      kernel_size (qjit.qconv2d's kernel: inductor's fallback kernels take an
      argument named `kernel` of their own), stride, padding, dilation: two
      ints each (lists or tuples).

Called eagerly, a custom op costs torch's dispatcher on top of qjit.ops'
function: qjit.nn's modules call them only while torch.compile or
torch.export traces (torch.compiler.is_compiling()), and qjit.ops otherwise.
"""
import inspect

from . import ops as _ops

MIN_TORCH = (2, 4)

torch = None
unavailable = None  # why torch.ops.qjit is not registered; None when it is
try:
    import torch
except ImportError:
    unavailable = "qjit's custom ops need PyTorch (pip install torch)"
else:
    if not (hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")):
        unavailable = ("torch.ops.qjit needs torch %d.%d or newer (torch.library.custom_op and register_fake); this is "
                       "torch %s. qjit's eager ops and qjit.nn work without it, outside torch.compile"
                       % (MIN_TORCH + (torch.__version__,)))


class _Unregistered:
    """Stands for torch.ops.qjit where the ops are not registered: every attribute is an AttributeError saying why."""

    def __getattr__(self, name):
        raise AttributeError("torch.ops.qjit.%s is not registered: %s" % (name, unavailable))


def _register(fn, checked, result=None, renamed=None):
    """Registers fn (annotated: torch.library infers the schema) as qjit::<its name> with qjit.ops' checked path as
    its fake implementation. The dispatcher hands a Python kernel its arguments positionally and leaves out those
    equal to their defaults, so the fake binds them to fn's signature and passes each by name: qjit.ops' names,
    but those in `renamed` (op name -> qjit.ops name). result: maps what the checked path returns to the op's."""
    op = torch.library.custom_op("qjit::" + fn.__name__, fn, mutates_args=())
    signature = inspect.signature(fn)
    renamed = renamed or {}

    def fake(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        y = checked(**{renamed.get(k, k): v for k, v in bound.arguments.items()}, fake=True)
        return result(y) if result else y

    op.register_fake(fake)
    return op


def _define():
    from typing import List, Optional, Tuple

    Tensor = torch.Tensor

    def wq_gemm(x: Tensor, qweight: Tensor, scales: Tensor, zeros: Optional[Tensor] = None,
                bias: Optional[Tensor] = None, residual: Optional[Tensor] = None, *, bits: int = 4, g: int = 128,
                zero: str = "int", act: str = "none") -> Tensor:
        return _ops.wq_gemm(x, qweight, scales, zeros, bits=bits, g=g, zero=zero, bias=bias, act=act,
                            residual=residual)

    def awq_dequant(qweight: Tensor, qzeros: Optional[Tensor], scales: Tensor, *, layout: str = "awq",
                    symmetric: bool = False, out_dtype: Optional[str] = None) -> Tensor:
        return _ops.awq_dequant(qweight, qzeros, scales, layout=layout, symmetric=symmetric, out_dtype=out_dtype)

    def fused_ffn(x: Tensor, w1: Tensor, w3: Tensor, scales1: Optional[Tensor] = None,
                  zeros1: Optional[Tensor] = None, scales3: Optional[Tensor] = None, zeros3: Optional[Tensor] = None,
                  *, bits: int = 4, g: int = 128, zero: str = "int", act: str = "silu") -> Tensor:
        return _ops.fused_ffn(x, w1, w3, scales1=scales1, zeros1=zeros1, scales3=scales3, zeros3=zeros3, bits=bits,
                              g=g, zero=zero, act=act)

    def fp_lut(x: Tensor, fn: str = "silu", *, cuts: Optional[str] = None, out_dtype: Optional[str] = None) -> Tensor:
        return _ops.fp_lut(x, fn, cuts=cuts, out_dtype=out_dtype)

    def both(r):
        """gru_quant's (y, y_float): y_float an empty float32 [0] when the call made none (one schema for both)."""
        return r if isinstance(r, tuple) else (r, r.new_empty((0,), dtype=torch.float32))

    def gru_quant(x: Tensor, h0: Tensor, W: Tensor, R: Tensor, bw: Tensor, br: Tensor, params: str, *,
                  float_out: bool = False) -> Tuple[Tensor, Tensor]:
        return both(_ops.gru_quant(x, h0, W, R, bw, br, params, float_out=float_out))

    def w8a8_gemm(x: Tensor, wq: Tensor, w_scale: Tensor, w_offset: Optional[Tensor] = None,
                  w_sum: Optional[Tensor] = None, bias: Optional[Tensor] = None, *, block: int = 128,
                  quant_a: str = "offset", format: Optional[str] = None, act: str = "none") -> Tensor:
        return _ops.w8a8_gemm(x, wq, w_scale, w_offset, w_sum, block=block, quant_a=quant_a, format=format, bias=bias,
                              act=act)

    def qconv2d(x: Tensor, qweight: Tensor, scales: Tensor, offsets: Tensor, bias: Optional[Tensor] = None, *,
                bits: int = 4, block: int = 32, kernel_size: List[int], stride: List[int], padding: List[int],
                dilation: List[int], layout: str = "nchw", act: str = "none") -> Tensor:
        return _ops.qconv2d(x, qweight, scales, offsets, bits=bits, block=block, kernel=kernel_size, stride=stride,
                            padding=padding, dilation=dilation, layout=layout, bias=bias, act=act)

    for fn in (wq_gemm, awq_dequant, fused_ffn, fp_lut, w8a8_gemm):
        _register(fn, getattr(_ops, "_%s_checked" % fn.__name__))
    _register(gru_quant, _ops._gru_quant_checked, result=both)
    _register(qconv2d, _ops._qconv2d_checked, renamed={"kernel_size": "kernel"})


if unavailable is None:
    _define()
    ops = torch.ops.qjit
else:
    ops = _Unregistered()

NAMES = ("wq_gemm", "awq_dequant", "fused_ffn", "fp_lut", "gru_quant", "w8a8_gemm", "qconv2d")

__all__ = ["ops", "unavailable", "NAMES", "MIN_TORCH"]
