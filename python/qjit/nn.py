"""torch.nn modules over qjit's ops (needs PyTorch; `import qjit` does not).

- QuantLinear: y = x·Wᵀ (+ bias) with W group-quantized in qjit's native
  layout (wq_gemm). From AWQ tensors (`from_awq`, repacked by the `qjit`
  command, bit-exact), a checkpoint `qjit repack --checkpoint` wrote
  (`from_checkpoint`) or a float nn.Linear (`from_float`: 4 bits per group
  with integer zero points, packed in torch by qjit.wq).
- FusedFFN: SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ), a Llama MLP's gate and up projections, in
  one fused_ffn launch for 1..8 rows; more rows take two wq_gemm calls (or two
  dense matmuls) and torch's silu, the kernels that serve large M.
- QuantGRU: the fixed-point GRU (gru_quant) with a torch.nn.GRU's call
  convention on float input, from `qjit gru calibrate`'s params and weights.
- W8A8Linear: y = x·Wᵀ (+ bias) with W int8 per output channel and block of
  K and x quantized on the fly per row and block (w8a8_gemm), from a float
  nn.Linear (`from_float`, qjit.w8a8.pack_weights); or both in FP8 e4m3
  (format="e4m3": W per 128 × 128 tile, x per row and block of 128).
- QConv2d: an nn.Conv2d with int4 or int8 weights per output channel and
  block of input channels (qconv2d) on fp16/fp32 input, contiguous (NCHW) or
  channels_last (NHWC), from a float nn.Conv2d (`from_float`, qjit.conv).
- GatedMLP: a Llama-style MLP, down(SiLU(gate(x)) ⊙ up(x)), gate and up as a
  FusedFFN.

Whole models (a transformers model, or any module): quantize_model turns
every nn.Linear of a float model into QuantLinear, W8A8Linear or its e4m3
format; load_quantized maps an AWQ/GPTQ checkpoint's layers to the model's
Linears by name; both make each Llama-style MLP of 4-bit layers a GatedMLP.
load_dequantized writes the weights the kernels multiply into a float copy
(the twin tests and benchmarks compare against).

Each module keeps its tensors as buffers of fixed shapes given by its
constructor's arguments, so a module built with the same arguments loads
another's state_dict; from_float builds one and fills them.

torch.compile and torch.export: while they trace (torch.compiler.is_compiling()),
forward calls the custom ops torch.ops.qjit.* (qjit/custom_ops.py, registered
when this module is imported), which they see through: no graph break, and
CUDA graphs (mode="reduce-overhead") capture the launches. Otherwise forward
calls qjit.ops' functions directly (a custom op called eagerly adds torch's
dispatcher) and reads its tensors from the module's buffer dict (_tensors:
Module.__getattr__ costs about 0.5 µs a buffer).
"""
import difflib
import fnmatch
import json
import operator
import os
import tempfile
from collections import namedtuple

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - CI has no torch
    raise ImportError("qjit.nn needs PyTorch (pip install torch); the rest of qjit works without it") from e

from . import _cli
from . import conv as _conv
from . import safetensors as st
from . import w8a8 as _w8a8
from . import wq as _wq
from ._check import numel
from .custom_ops import ops as _qjit  # torch.ops.qjit (or what says why it is not registered)
from .ops import fused_ffn, gru_quant, qconv2d, w8a8_gemm, wq_gemm

# True while torch.compile or torch.export traces (Dynamo folds the call to a constant), False in eager.
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


def _tensors(m):
    """The tensors named by m's class in _TENSORS, in order, for the eager path: from m._buffers through the class's
    _get (an operator.itemgetter of those names), tens of ns where the attributes cost µs. A name that is no longer
    a buffer (an nn.Parameter assigned to it moves it to m._parameters) is read as an attribute."""
    try:
        return m._get(m._buffers)
    except KeyError:
        return tuple(getattr(m, name) for name in m._TENSORS)


def _native_fits(who, k, n, group_size):
    """Refuses what the native layout cannot hold (and from_float cannot pack): K % 64, N % 16, g dividing K."""
    if k % 64 or n % 16:
        raise ValueError("%s: in_features=%d, out_features=%d; the native layout needs in_features a multiple of 64 "
                         "and out_features of 16" % (who, k, n))
    if group_size <= 0 or k % group_size:
        raise ValueError("%s: group_size=%d must divide in_features=%d" % (who, group_size, k))


class QuantLinear(torch.nn.Module):
    """A drop-in quantized nn.Linear(in_features, out_features): y = act(x·Wᵀ + b).

    Buffers (qjit's native layout, wq_gemm's arguments): qweight int32
    [K·N·bits/32], scales [K/g, N] (fp16 or bf16), zeros uint8 [K/g, N]
    (zero="int"), the scales' type (zero="float") or None (zero="sym"),
    bias [N] of the activations' type or None. forward(x, residual=None)
    takes x [..., K] and adds `residual` [..., N] after the activation.
    """

    _TENSORS = ("qweight", "scales", "zeros", "bias")
    _get = operator.itemgetter(*_TENSORS)

    def __init__(self, in_features, out_features, bias=False, *, bits=4, group_size=128, zero="int",
                 dtype=torch.float16, act="none", device=None):
        super().__init__()
        k, n, g = in_features, out_features, group_size
        if g <= 0 or k % g:
            raise ValueError("QuantLinear: group_size=%d must divide in_features=%d" % (g, k))
        self.in_features, self.out_features, self.bits, self.group_size = k, n, bits, g
        self.zero, self.act = zero, act
        self.register_buffer("qweight", torch.zeros(k * n * bits // 32, dtype=torch.int32, device=device))
        self.register_buffer("scales", torch.zeros(k // g, n, dtype=dtype, device=device))
        zeros = None
        if zero == "int":
            zeros = torch.zeros(k // g, n, dtype=torch.uint8, device=device)
        elif zero == "float":
            zeros = torch.zeros(k // g, n, dtype=dtype, device=device)
        self.register_buffer("zeros", zeros)
        self.register_buffer("bias", torch.zeros(n, dtype=dtype, device=device) if bias else None)

    def forward(self, x, residual=None):
        if _compiling():
            return _qjit.wq_gemm(x, self.qweight, self.scales, self.zeros, self.bias, residual, bits=self.bits,
                                 g=self.group_size, zero=self.zero, act=self.act)
        qweight, scales, zeros, bias = _tensors(self)
        return wq_gemm(x, qweight, scales, zeros, bits=self.bits, g=self.group_size, zero=self.zero, bias=bias,
                       act=self.act, residual=residual)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bits=%d, group_size=%d, zero=%s, bias=%s" % (
            self.in_features, self.out_features, self.bits, self.group_size, self.zero, self.bias is not None)

    def dequantized_weight(self):
        """W [N, K] float32 as the kernel multiplies it, (q − z)·s per group (qjit.wq.dequantize; 4 bits only)."""
        if self.bits != 4:
            raise NotImplementedError("QuantLinear.dequantized_weight: bits=%d; qjit.wq unpacks 4-bit weights only"
                                      % self.bits)
        return _wq.dequantize(self.qweight, self.scales, self.zeros, self.zero)

    @classmethod
    def from_float(cls, linear, *, group_size=128, dtype=None, act="none", device=None):
        """From a float nn.Linear: 4-bit codes per group of `group_size` inputs with integer zero points
        (qjit.wq.quantize: min-max, round half to even), packed in torch into the native layout (qjit.wq.pack:
        `qjit repack`'s words, bit for bit). Scales in `dtype` (default: the weight's type if fp16 or bf16, else
        fp16); the bias kept in the weight's type (the activations'); on `device` (default: the Linear's)."""
        who = "QuantLinear.from_float"
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError("%s: expected a torch.nn.Linear, got %s" % (who, type(linear).__name__))
        _native_fits(who, linear.in_features, linear.out_features, group_size)
        w = linear.weight.detach()
        device = device if device is not None else w.device
        q, scales, zeros = _wq.quantize(w.to(device), group_size, dtype)
        bias = linear.bias.detach().to(device) if linear.bias is not None else None
        return cls.from_native(_wq.pack(q), scales, zeros, bias, act=act, device=device)

    @classmethod
    def from_native(cls, qweight, scales, zeros=None, bias=None, *, bits=4, act="none", device=None):
        """From native-layout tensors (qweight words, scales [K/g, N], zeros uint8 [K/g, N] or None for sym)."""
        groups, n = scales.shape
        k = qweight.numel() * 32 // (bits * n)
        if k * n * bits != qweight.numel() * 32 or k % groups:
            raise ValueError("QuantLinear: qweight has %d words, which does not fit scales [%d, %d] at %d bits"
                             % (qweight.numel(), groups, n, bits))
        m = cls(k, n, bias is not None, bits=bits, group_size=k // groups, zero="int" if zeros is not None else "sym",
                dtype=scales.dtype, act=act, device="meta")
        m.qweight = qweight.to(device=device, dtype=torch.int32).reshape(-1)
        m.scales = scales.to(device)
        m.zeros = zeros.to(device) if zeros is not None else None
        m.bias = bias.to(device) if bias is not None else None
        return m

    @classmethod
    def from_checkpoint(cls, path, prefix, bias=None, *, act="none", device="cuda"):
        """Layer PREFIX of a native checkpoint (`qjit repack --checkpoint` or qjit.repack_checkpoint)."""
        names = [prefix + ".qweight", prefix + ".scales"]
        entries, _ = st.read_header(path)
        if prefix + ".zeros" in entries:
            names.append(prefix + ".zeros")
        t = st.read(path, names)
        zeros = t.get(prefix + ".zeros")
        return cls.from_native(st.to_torch(t[prefix + ".qweight"]), st.to_torch(t[prefix + ".scales"]),
                               st.to_torch(zeros) if zeros is not None else None, bias, act=act, device=device)

    @classmethod
    def from_awq(cls, qweight, qzeros, scales, bias=None, *, act="none", device=None):
        """From one AWQ layer: qweight int32 [K, N/8], qzeros int32 [K/g, N/8], scales [K/g, N].

        Repacked by `qjit repack --checkpoint` through temporary files, so the
        native tensors are exactly the C++ packer's (needs the `qjit` command:
        qjit.find_cli())."""
        device = device if device is not None else scales.device
        with tempfile.TemporaryDirectory(prefix="qjit_awq_") as tmp:
            src, dst = os.path.join(tmp, "awq.safetensors"), os.path.join(tmp, "native.safetensors")
            st.write(src, {"layer.qweight": st.from_torch(qweight), "layer.qzeros": st.from_torch(qzeros),
                           "layer.scales": st.from_torch(scales)})
            _cli.repack_checkpoint(src, dst, from_="awq")
            return cls.from_checkpoint(dst, "layer", bias, act=act, device=device)


class FusedFFN(torch.nn.Module):
    """SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ): a Llama MLP's gate (W1) and up (W3) projections.

    Quantized (`from_quant`: two QuantLinear of the same shape and format) or
    dense (`from_dense`: W1, W3 [H, D]). 1..8 rows of x go through one
    fused_ffn launch; more rows through two wq_gemm calls (dense: two
    matmuls) and torch's silu, since fused_ffn serves decode-size M only.
    """

    _TENSORS = ("w1", "w3")
    _get = operator.itemgetter(*_TENSORS)

    def __init__(self, gate=None, up=None, w1=None, w3=None, act="silu"):
        super().__init__()
        self.gate, self.up, self.act = gate, up, act
        if w1 is not None:
            self.register_buffer("w1", w1)
            self.register_buffer("w3", w3)
        else:
            self.w1 = self.w3 = None

    @classmethod
    def from_quant(cls, gate, up, act="silu"):
        if (gate.in_features, gate.out_features, gate.bits, gate.group_size, gate.zero) != (
                up.in_features, up.out_features, up.bits, up.group_size, up.zero):
            raise ValueError("FusedFFN: gate and up must have the same shape, bits, group size and zero mode")
        return cls(gate=gate, up=up, act=act)

    @classmethod
    def from_dense(cls, w1, w3, act="silu"):
        return cls(w1=w1, w3=w3, act=act)

    def forward(self, x):
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if 1 <= rows <= 8:
            if _compiling():
                return self._traced(x)
            modules = self._modules  # gate and up, when quantized (Module.__getattr__ is slow, as for buffers)
            if "gate" not in modules:
                w1, w3 = _tensors(self)
                return fused_ffn(x, w1, w3, act=self.act)
            g, u = modules["gate"], modules["up"]
            qw1, s1, z1, _ = _tensors(g)
            qw3, s3, z3, _ = _tensors(u)
            return fused_ffn(x, qw1, qw3, scales1=s1, zeros1=z1, scales3=s3, zeros3=z3, bits=g.bits, g=g.group_size,
                             zero=g.zero, act=self.act)
        if self.gate is None:
            return F.silu(F.linear(x, self.w1.to(x.dtype))) * F.linear(x, self.w3.to(x.dtype))
        g, u = self.gate, self.up
        if self.act != "silu":
            raise ValueError("FusedFFN: act=%r is fused_ffn's table SiLU, available for 1..8 rows only; x has %d"
                             % (self.act, rows))
        return F.silu(g(x)) * u(x)

    def _traced(self, x):
        """forward's fused_ffn (1..8 rows) as the custom op, while torch.compile or torch.export traces."""
        if self.gate is None:
            return _qjit.fused_ffn(x, self.w1, self.w3, act=self.act)
        g, u = self.gate, self.up
        return _qjit.fused_ffn(x, g.qweight, u.qweight, g.scales, g.zeros, u.scales, u.zeros, bits=g.bits,
                               g=g.group_size, zero=g.zero, act=self.act)


def _qtensor(params, name):
    t = params["tensors"][name]
    bits, signed = int(t["bits"]), bool(t["signed"])
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return int(t["shift"]), int(t["zp"]), lo, hi


class QuantGRU(torch.nn.Module):
    """A one-layer GRU in fixed point (gru_quant), called like torch.nn.GRU
    (batch_first=False): forward(x [T, N, C] float, h0 [1, N, H] or None) ->
    (output [T, N, H] float32, h_n [1, N, H]).

    x and h0 are quantized with the params' x and h: q = saturate(round half
    to even(v·2^shift) + zp), as `qjit gru run` does (NaN is not checked on
    the GPU). forward_codes runs on integer codes directly.
    """

    _TENSORS = ("W", "R", "bw", "br")
    _get = operator.itemgetter(*_TENSORS)

    def __init__(self, params, W, R, bw, br):
        super().__init__()
        self.params = params if isinstance(params, dict) else json.loads(params)
        self.params_text = json.dumps(self.params)
        self.input_size = int(self.params["input_size"])
        self.hidden_size = int(self.params["hidden_size"])
        for name, v in (("W", W), ("R", R), ("bw", bw), ("br", br)):
            self.register_buffer(name, v)
        self._x = _qtensor(self.params, "x")
        self._h = _qtensor(self.params, "h")

    @classmethod
    def from_files(cls, params_path, weights_path, device="cuda"):
        """From `qjit gru calibrate -o PARAMS --weights-out WEIGHTS`."""
        with open(params_path) as f:
            params = json.load(f)
        t = st.read(weights_path, ["W", "R", "bw", "br"])
        return cls(params, *(st.to_torch(t[k], device) for k in ("W", "R", "bw", "br")))

    @staticmethod
    def _quantize(v, q):
        shift, zp, lo, hi = q
        y = torch.round(v.double() * 2.0 ** shift)  # exact: a power of two; round: half to even
        return (y.clamp(-2.0 ** 40, 2.0 ** 40) + zp).clamp(lo, hi).to(torch.int32)

    def forward_codes(self, xq, h0q):
        """Integer codes in (x [T, N, C], h0 [N, H] int32) -> (y int32, y_float float32), both [T, N, H]."""
        if _compiling():
            return _qjit.gru_quant(xq.contiguous(), h0q.contiguous(), self.W, self.R, self.bw, self.br,
                                   self.params_text, float_out=True)
        W, R, bw, br = _tensors(self)
        return gru_quant(xq.contiguous(), h0q.contiguous(), W, R, bw, br, self.params_text, float_out=True)

    def forward(self, x, h0=None):
        t, n, _ = x.shape
        if h0 is None:
            h0 = torch.zeros(n, self.hidden_size, device=x.device)
        elif h0.dim() == 3:
            h0 = h0[0]
        _, y = self.forward_codes(self._quantize(x, self._x), self._quantize(h0, self._h))
        return y, y[-1:].clone()


_ACTS = ("none", "relu", "relu6")


def _choice(who, name, value, allowed):
    if value not in allowed:
        raise ValueError("%s: %s=%r; expected one of %s" % (who, name, value, ", ".join(map(repr, allowed))))
    return value


class W8A8Linear(torch.nn.Module):
    """A drop-in nn.Linear(in_features, out_features) in int8 (w8a8_gemm): y = act(x·Wᵀ + b).

    W is int8 per output channel and block of `block` inputs; x is quantized
    on the fly per row and block. quant_w: "offset" (w ≈ q·s + o) or
    "symmetric" (q·s); quant_a the same for x ("offset" is seed 002's QuantA).
    Buffers (w8a8_gemm's arguments): wq int8 [N, K], w_scale float32
    [K/block, N], w_offset float32 [K/block, N] (None for symmetric W), w_sum
    int32 [K/block, N] (each block's Σ of codes; None with quant_a
    "symmetric", which does not use it), bias [N] of `dtype` or None.
    forward(x) takes x [..., K] of `dtype` (fp16, bf16 or fp32; without a
    bias any of them) and returns y [..., N] of x's type.

    format="e4m3" (compute capability 8.9+): W as FP8 e4m3 codes with one
    scale per 128 × 128 tile and x quantized to e4m3 per row and block of
    128 (w8a8_gemm's FP8 format, taken from wq's dtype): wq
    torch.float8_e4m3fn [N, K], w_scale float32 [K/128, N/128], no w_offset
    or w_sum; block 128, in_features and out_features multiples of 128;
    quant_a and quant_w do not apply.
    """

    _TENSORS = ("wq", "w_scale", "w_offset", "w_sum", "bias")
    _get = operator.itemgetter(*_TENSORS)

    def __init__(self, in_features, out_features, bias=False, *, block=128, quant_a="offset", quant_w="offset",
                 format="int8", dtype=torch.float16, act="none", device=None):
        super().__init__()
        k, n = in_features, out_features
        who = "W8A8Linear"
        if not 32 <= block <= 512 or k % block:
            raise ValueError("%s: block=%d; expected 32..512 dividing in_features=%d" % (who, block, k))
        _choice(who, "quant_a", quant_a, ("offset", "symmetric"))
        _choice(who, "quant_w", quant_w, ("offset", "symmetric"))
        _choice(who, "format", format, ("int8", "e4m3"))
        _choice(who, "act", act, _ACTS)
        fp8 = format == "e4m3"
        if fp8 and (block != 128 or k % 128 or n % 128):
            raise ValueError("%s: format='e4m3' takes block=128 and in_features, out_features multiples of 128; got "
                             "block=%d, in_features=%d, out_features=%d" % (who, block, k, n))
        self.in_features, self.out_features, self.block = k, n, block
        self.quant_a, self.quant_w, self.format, self.act = quant_a, quant_w, format, act
        blocks = (k // block, n // 128 if fp8 else n)
        self.register_buffer("wq", torch.zeros(n, k, dtype=torch.float8_e4m3fn if fp8 else torch.int8, device=device))
        self.register_buffer("w_scale", torch.ones(blocks, dtype=torch.float32, device=device))
        self.register_buffer("w_offset", torch.zeros(blocks, dtype=torch.float32, device=device)
                             if quant_w == "offset" and not fp8 else None)
        self.register_buffer("w_sum", torch.zeros(blocks, dtype=torch.int32, device=device)
                             if quant_a == "offset" and not fp8 else None)
        self.register_buffer("bias", torch.zeros(n, dtype=dtype, device=device) if bias else None)

    def forward(self, x):
        if _compiling():
            return _qjit.w8a8_gemm(x, self.wq, self.w_scale, self.w_offset, self.w_sum, self.bias, block=self.block,
                                   quant_a=self.quant_a, act=self.act)
        wq, w_scale, w_offset, w_sum, bias = _tensors(self)
        return w8a8_gemm(x, wq, w_scale, w_offset, w_sum, block=self.block, quant_a=self.quant_a, bias=bias,
                         act=self.act)

    def extra_repr(self):
        if self.format == "e4m3":
            return "in_features=%d, out_features=%d, bias=%s, format=e4m3, act=%s" % (
                self.in_features, self.out_features, self.bias is not None, self.act)
        return "in_features=%d, out_features=%d, bias=%s, block=%d, quant_a=%s, quant_w=%s, act=%s" % (
            self.in_features, self.out_features, self.bias is not None, self.block, self.quant_a, self.quant_w,
            self.act)

    def dequantized_weight(self):
        """W [N, K] float32 as the kernel multiplies it: q·s (+ o) per block, or e4m3 code · tile scale
        (qjit.w8a8.dequantize)."""
        return _w8a8.dequantize(self.wq, self.w_scale, self.w_offset)

    @classmethod
    def from_float(cls, linear, *, block=128, quant_a="offset", quant_w="offset", format="int8", act="none",
                   dtype=None, device=None):
        """From a float nn.Linear: W quantized by qjit.w8a8.pack_weights with rule `quant_w` (format "int8") or
        to e4m3 tiles (format "e4m3"); the bias kept in `dtype` (default: the Linear's weight type), on `device`
        (default: the Linear's)."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError("W8A8Linear.from_float: expected a torch.nn.Linear, got %s" % type(linear).__name__)
        w = linear.weight.detach()
        dtype = dtype or w.dtype
        device = device if device is not None else w.device
        m = cls(linear.in_features, linear.out_features, linear.bias is not None, block=block, quant_a=quant_a,
                quant_w=quant_w, format=format, dtype=dtype, act=act, device="meta")
        wq, scale, offset, sums = _w8a8.pack_weights(w.to(device), block, quant_w, format)
        m.wq, m.w_scale, m.w_offset = wq, scale, offset
        m.w_sum = sums if quant_a == "offset" else None
        m.bias = linear.bias.detach().to(device=device, dtype=dtype) if linear.bias is not None else None
        return m


def _pair(who, name, v):
    if isinstance(v, int):
        return v, v
    try:
        a, b = v
    except (TypeError, ValueError):
        raise TypeError("%s: %s=%r; expected an int or a pair of ints" % (who, name, v)) from None
    if not isinstance(a, int) or not isinstance(b, int):
        raise TypeError("%s: %s=%r; expected an int or a pair of ints" % (who, name, v))
    return a, b


class QConv2d(torch.nn.Module):
    """A drop-in nn.Conv2d (groups=1, zero padding) with int4 or int8 weights (qconv2d).

    Each output channel's weights are quantized per block of `block` input
    channels over the whole kernel window: w ≈ q·scale + offset. Buffers
    (qconv2d's arguments, qjit.conv): qweight int8 [Co, Kh, Kw, Ci] (bits=8)
    or uint8 [Co, Kh, Kw, Ci/2] (bits=4), scales and offsets float32
    [Co, Ci/block], bias float32 [Co] or None. act: "none", "relu" or
    "relu6", applied after the bias.

    forward(x): x [N, Ci, H, W] (or [Ci, H, W]) fp16 or fp32, either
    contiguous (runs as NCHW) or channels_last (runs as NHWC, no copy);
    returns y [N, Co, Oh, Ow] of x's type in x's memory format. Any other
    strides are refused: pass x.contiguous() or
    x.contiguous(memory_format=torch.channels_last).
    """

    _TENSORS = ("qweight", "scales", "offsets", "bias")
    _get = operator.itemgetter(*_TENSORS)

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, bias=False, *,
                 bits=4, block=32, act="none", device=None):
        super().__init__()
        who = "QConv2d"
        ci, co = in_channels, out_channels
        kh, kw = _pair(who, "kernel_size", kernel_size)
        self.stride = _pair(who, "stride", stride)
        self.dilation = _pair(who, "dilation", dilation)
        if padding == "valid":
            padding = 0
        elif padding == "same":
            if self.stride != (1, 1) or any(d * (k - 1) % 2 for d, k in zip(self.dilation, (kh, kw))):
                raise ValueError("%s: padding='same' needs stride 1 and an even dilation·(kernel − 1) on each axis "
                                 "(qconv2d pads both sides alike); stride=%s, dilation=%s, kernel_size=%s"
                                 % (who, self.stride, self.dilation, (kh, kw)))
            padding = tuple(d * (k - 1) // 2 for d, k in zip(self.dilation, (kh, kw)))
        self.padding = _pair(who, "padding", padding)
        if bits not in (4, 8):
            raise ValueError("%s: bits=%r; expected 4 or 8" % (who, bits))
        if block <= 0 or ci % block:
            raise ValueError("%s: block=%d must divide in_channels=%d" % (who, block, ci))
        if bits == 4 and (ci % 2 or block % 2):
            raise ValueError("%s: bits=4 packs two input channels a byte: in_channels=%d and block=%d must be even "
                             "(use bits=8)" % (who, ci, block))
        _choice(who, "act", act, _ACTS)
        self.in_channels, self.out_channels, self.kernel_size = ci, co, (kh, kw)
        self.bits, self.block, self.act = bits, block, act
        per_row = ci if bits == 8 else ci // 2
        self.register_buffer("qweight", torch.zeros(co, kh, kw, per_row, dtype=torch.int8 if bits == 8 else torch.uint8,
                                                    device=device))
        self.register_buffer("scales", torch.ones(co, ci // block, dtype=torch.float32, device=device))
        self.register_buffer("offsets", torch.zeros(co, ci // block, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(co, dtype=torch.float32, device=device) if bias else None)

    def forward(self, x):
        if x.dim() == 3:
            return self.forward(x[None])[0]
        if x.dim() != 4:
            raise ValueError("QConv2d: x has shape %s; expected [N, C, H, W] or [C, H, W]" % (list(x.shape),))
        if x.shape[1] != self.in_channels:
            raise ValueError("QConv2d: x has %d channels (shape %s); expected in_channels=%d"
                             % (x.shape[1], list(x.shape), self.in_channels))
        if x.is_contiguous():
            return self._conv(x, "nchw")
        if x.is_contiguous(memory_format=torch.channels_last):
            return self._conv(x.permute(0, 2, 3, 1), "nhwc").permute(0, 3, 1, 2)
        raise ValueError("QConv2d: x (shape %s, stride %s) is neither contiguous nor channels_last; pass "
                         "x.contiguous() or x.contiguous(memory_format=torch.channels_last)"
                         % (list(x.shape), tuple(x.stride())))

    def _conv(self, x, layout):
        if _compiling():
            return _qjit.qconv2d(x, self.qweight, self.scales, self.offsets, self.bias, bits=self.bits,
                                 block=self.block, kernel_size=self.kernel_size, stride=self.stride,
                                 padding=self.padding, dilation=self.dilation, layout=layout, act=self.act)
        qweight, scales, offsets, bias = _tensors(self)
        return qconv2d(x, qweight, scales, offsets, bits=self.bits, block=self.block, kernel=self.kernel_size,
                       stride=self.stride, padding=self.padding, dilation=self.dilation, layout=layout, bias=bias,
                       act=self.act)

    def extra_repr(self):
        return ("%d, %d, kernel_size=%s, stride=%s, padding=%s, dilation=%s, bias=%s, bits=%d, block=%d, act=%s"
                % (self.in_channels, self.out_channels, self.kernel_size, self.stride, self.padding, self.dilation,
                   self.bias is not None, self.bits, self.block, self.act))

    def dequantized_weight(self):
        """W [Co, Ci, Kh, Kw] float32 as the kernel multiplies it: q·scale + offset (qjit.conv.dequantize)."""
        return _conv.dequantize(self.qweight, self.scales, self.offsets, self.bits)

    @classmethod
    def from_float(cls, conv, *, bits=4, block=32, rule="offset", act="none", device=None):
        """From a float nn.Conv2d: W quantized by qjit.conv.pack_weights (rule "offset" or "symmetric"), the
        bias as float32, on `device` (default: the Conv2d's). Refuses what qconv2d does not compute: groups
        other than 1 and padding modes other than zeros."""
        who = "QConv2d.from_float"
        if not isinstance(conv, torch.nn.Conv2d):
            raise TypeError("%s: expected a torch.nn.Conv2d, got %s" % (who, type(conv).__name__))
        if conv.groups != 1:
            raise ValueError("%s: groups=%d; qconv2d computes dense convolutions only (groups=1)" % (who, conv.groups))
        if conv.padding_mode != "zeros":
            raise ValueError("%s: padding_mode=%r; qconv2d pads with zeros only" % (who, conv.padding_mode))
        w = conv.weight.detach()
        device = device if device is not None else w.device
        m = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                conv.bias is not None, bits=bits, block=block, act=act, device="meta")
        m.qweight, m.scales, m.offsets = _conv.pack_weights(w.to(device), bits, block, rule)
        m.bias = conv.bias.detach().to(device=device, dtype=torch.float32) if conv.bias is not None else None
        return m


class GatedMLP(torch.nn.Module):
    """A Llama-style MLP, down_proj(SiLU(gate_proj(x)) ⊙ up_proj(x)), with gate and up as one FusedFFN: one
    fused_ffn launch for 1..8 rows of x (batch × sequence, a decode step), two wq_gemm calls and torch's silu
    for more (a prefill), then down_proj. quantize_model and load_quantized put one in place of each such MLP
    of 4-bit layers; its QuantLinears are ffn.gate, ffn.up and down_proj."""

    def __init__(self, ffn, down_proj):
        super().__init__()
        self.ffn, self.down_proj = ffn, down_proj

    def forward(self, x):
        return self.down_proj(self.ffn(x))


# ---- whole models -----------------------------------------------------------------------------------------------

SCHEMES = ("int4", "w8a8", "fp8")


def _skipped(name, skip):
    """name matches one of the fnmatch patterns in `skip`, whole or by its last part ("lm_head")."""
    last = name.rsplit(".", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(last, p) for p in skip)


def _replace(model, name, module):
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def _is_silu(act):
    return isinstance(act, torch.nn.SiLU) or type(act).__name__ in ("SiLU", "SiLUActivation")


def _fuse_mlps(model):
    """Each module of exactly gate_proj, up_proj and down_proj (gate and up QuantLinears of one format, no bias)
    and act_fn SiLU, as transformers' Llama, Mistral and Qwen2 MLPs are: a GatedMLP in its place."""
    for name, m in list(model.named_modules()):
        children = dict(m.named_children())
        gate, up = children.get("gate_proj"), children.get("up_proj")
        if (set(children) == {"gate_proj", "up_proj", "down_proj", "act_fn"} and _is_silu(m.act_fn)
                and isinstance(gate, QuantLinear) and isinstance(up, QuantLinear)
                and gate.bias is None and up.bias is None and gate.act == up.act == "none"
                and (gate.in_features, gate.out_features, gate.bits, gate.group_size, gate.zero)
                == (up.in_features, up.out_features, up.bits, up.group_size, up.zero)):
            _replace(model, name, GatedMLP(FusedFFN.from_quant(gate, up), m.down_proj))


def quantize_model(model, scheme="int4", *, group_size=128, block=128, quant_a="offset", quant_w="offset",
                   skip=("lm_head",), fuse_mlp=True):
    """Quantizes `model` in place: every torch.nn.Linear but those `skip` names becomes a qjit module made
    from its weights, on its device.

    scheme "int4": QuantLinear.from_float (4 bits per group of `group_size` inputs, integer zero points);
    "w8a8": W8A8Linear.from_float (int8 per block of `block`, rules quant_a and quant_w); "fp8":
    W8A8Linear.from_float(format="e4m3"). skip: module names or fnmatch patterns, matched against the whole
    name or its last part (the default leaves the output head in float; embeddings are no Linear and stay
    too). fuse_mlp (int4): each Llama-style MLP becomes a GatedMLP (gate and up in one fused_ffn launch
    where rows allow). A layer whose shape the scheme cannot take raises ValueError naming it, before any
    layer is replaced. Returns {name: qjit module} of the layers replaced, in model order
    (load_dequantized makes the float twin that tests compare against)."""
    _choice("quantize_model", "scheme", scheme, SCHEMES)
    fmt = "e4m3" if scheme == "fp8" else "int8"
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and not _skipped(n, skip)]
    for name, lin in layers:  # every layer checked (its module's arguments, on meta) before any is replaced
        k, n = lin.in_features, lin.out_features
        try:
            if scheme == "int4":
                _native_fits("QuantLinear", k, n, group_size)
            else:
                W8A8Linear(k, n, block=block, quant_a=quant_a, quant_w=quant_w, format=fmt, device="meta")
        except ValueError as e:
            raise ValueError("quantize_model: layer %s (in_features=%d, out_features=%d): %s; skip=[%r] leaves it "
                             "in float" % (name, k, n, e, name)) from None
    replaced = {}
    for name, lin in layers:
        if scheme == "int4":
            new = QuantLinear.from_float(lin, group_size=group_size)
        else:
            new = W8A8Linear.from_float(lin, block=block, quant_a=quant_a, quant_w=quant_w, format=fmt)
        _replace(model, name, new)
        replaced[name] = new
    if fuse_mlp:
        _fuse_mlps(model)
    return replaced


LoadResult = namedtuple("LoadResult", "replaced missing unexpected")
LoadResult.__doc__ = """What load_quantized did: replaced, {layer name: QuantLinear}; missing, the names of the
model's tensors the checkpoint did not give (tied copies of a loaded tensor left out); unexpected, the
checkpoint's tensors the model has no place for (left unread)."""


def _no_layer(name, model, linears):
    close = difflib.get_close_matches(name, linears, n=3)
    return ValueError("load_quantized: checkpoint layer %s is no torch.nn.Linear of %s%s" % (
        name, type(model).__name__, "; its closest are %s" % ", ".join(close) if close
        else " (its Linear layers are named like %s)" % (linears[0] if linears else "nothing: it has none")))


def load_quantized(model, checkpoint, *, config=None, from_=None, fuse_mlp=True):
    """Loads a 4-bit AWQ or GPTQ checkpoint (.safetensors) into `model`, a transformers model (or any module)
    of the checkpoint's architecture, in place: each quantized layer PREFIX (PREFIX.qweight, .qzeros, .scales)
    replaces the torch.nn.Linear named PREFIX with a QuantLinear (`qjit repack --checkpoint` makes the native
    tensors, bit-exact, in a temporary folder; needs the `qjit` command); each other tensor of the file is
    copied into the model's parameter or buffer of that name (a Linear's bias too); with fuse_mlp, each
    Llama-style MLP becomes a GatedMLP. A file that `qjit repack --checkpoint` wrote (metadata format
    qjit-native) is read as it is.

    config: the checkpoint's config.json, whose quantization_config gives the method and is checked; else
    from_="awq" or "gptq"; else model.config.quantization_config when the model has one. A layer the model
    has no Linear for, or whose shape differs, raises ValueError naming it, before anything is replaced.
    Returns a LoadResult."""
    entries, meta = st.read_header(checkpoint)
    if (meta or {}).get("format") == "qjit-native":
        return _load_native(model, checkpoint, fuse_mlp)
    with tempfile.TemporaryDirectory(prefix="qjit_load_") as tmp:
        if config is None and from_ is None:
            qc = getattr(getattr(model, "config", None), "quantization_config", None)
            if qc is None:
                raise ValueError("load_quantized: %s is not a qjit-native file and nothing says its method: pass "
                                 "config= (its config.json) or from_='awq' or 'gptq'" % checkpoint)
            config = os.path.join(tmp, "config.json")
            with open(config, "w") as f:
                json.dump({"quantization_config": qc if isinstance(qc, dict) else qc.to_dict()}, f)
        native = os.path.join(tmp, "native.safetensors")
        _cli.repack_checkpoint(checkpoint, native, config=config, from_=from_)
        return _load_native(model, native, fuse_mlp)


def _load_native(model, path, fuse_mlp):
    entries, _ = st.read_header(path)
    prefixes = {name[:-len(".qweight")] for name in entries if name.endswith(".qweight")}
    modules = dict(model.named_modules())
    linears = [n for n, m in modules.items() if isinstance(m, torch.nn.Linear)]
    for prefix in sorted(prefixes.difference(linears)):
        raise _no_layer(prefix, model, linears)
    plan = []
    for prefix in (n for n in linears if n in prefixes):  # in model order; every layer checked before any is replaced
        lin = modules[prefix]
        names = [prefix + ".qweight", prefix + ".scales"] + ([prefix + ".zeros"] if prefix + ".zeros" in entries
                                                             else [])
        groups, n = entries[prefix + ".scales"][1]
        words = numel(entries[prefix + ".qweight"][1])
        k = words * 8 // n if n else 0
        if (k, n) != (lin.in_features, lin.out_features):
            raise ValueError("load_quantized: layer %s is [K, N] = [%d, %d] in the checkpoint (%d words, scales "
                             "[%d, %d]) but the model's Linear has in_features=%d, out_features=%d"
                             % (prefix, k, n, words, groups, n, lin.in_features, lin.out_features))
        plan.append((prefix, lin, names))
    taken = {name for _, _, names in plan for name in names}
    state = model.state_dict(keep_vars=True)  # a replaced Linear's bias keeps its name and shape
    others = [name for name in entries if name not in taken]
    unexpected = [name for name in others if name not in state]
    wanted = [name for name in others if name in state]
    for name in wanted:
        shape, have = entries[name][1], tuple(state[name].shape)
        if shape != have:
            raise ValueError("load_quantized: tensor %s is %s in the checkpoint but %s in the model"
                             % (name, list(shape), list(have)))
    replaced = {}
    for prefix, lin, names in plan:
        t = {name: st.to_torch(v) for name, v in st.read(path, names).items()}
        bias = lin.bias.detach().clone() if lin.bias is not None else None
        new = QuantLinear.from_native(t[names[0]], t[names[1]], t.get(prefix + ".zeros"), bias,
                                      device=lin.weight.device)
        _replace(model, prefix, new)
        replaced[prefix] = new
    state = model.state_dict(keep_vars=True)
    loaded = set()
    with torch.no_grad():
        for name in wanted:
            target = state[name]
            target.copy_(st.to_torch(st.read(path, [name])[name]))
            loaded.add(target.data_ptr())
    missing = [name for name, v in state.items() if name not in taken and name not in wanted
               and v.data_ptr() not in loaded]
    if fuse_mlp:
        _fuse_mlps(model)
    return LoadResult(replaced, missing, unexpected)


def load_dequantized(model, replaced):
    """Writes into float `model` each replaced layer's dequantized_weight() (and its bias), by name: given a
    copy of the model taken before quantize_model or load_quantized, it makes the float twin that multiplies
    exactly the weights the kernels do (the reference of qjit's tests and benchmarks). Returns model."""
    with torch.no_grad():
        for name, m in replaced.items():
            lin = model.get_submodule(name)
            lin.weight.copy_(m.dequantized_weight())
            if m.bias is not None:
                lin.bias.copy_(m.bias)
    return model


__all__ = ["QuantLinear", "FusedFFN", "QuantGRU", "W8A8Linear", "QConv2d", "GatedMLP", "quantize_model",
           "load_quantized", "load_dequantized", "LoadResult", "SCHEMES"]
