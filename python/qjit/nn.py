"""torch.nn modules over qjit's ops (needs PyTorch; `import qjit` does not).

- QuantLinear: y = x·Wᵀ (+ bias) with W group-quantized in qjit's native
  layout (wq_gemm). From AWQ tensors (`from_awq`, repacked by the `qjit`
  command, bit-exact) or a checkpoint `qjit repack --checkpoint` wrote
  (`from_checkpoint`).
- FusedFFN: SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ), a Llama MLP's gate and up projections, in
  one fused_ffn launch for 1..8 rows; more rows take two wq_gemm calls (or two
  dense matmuls) and torch's silu, the kernels that serve large M.
- QuantGRU: the fixed-point GRU (gru_quant) with a torch.nn.GRU's call
  convention on float input, from `qjit gru calibrate`'s params and weights.
"""
import json
import os
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - CI has no torch
    raise ImportError("qjit.nn needs PyTorch (pip install torch); the rest of qjit works without it") from e

from . import _cli
from . import safetensors as st
from .ops import fused_ffn, gru_quant, wq_gemm

class QuantLinear(torch.nn.Module):
    """A drop-in quantized nn.Linear(in_features, out_features): y = act(x·Wᵀ + b).

    Buffers (qjit's native layout, wq_gemm's arguments): qweight int32
    [K·N·bits/32], scales [K/g, N] (fp16 or bf16), zeros uint8 [K/g, N]
    (zero="int"), the scales' type (zero="float") or None (zero="sym"),
    bias [N] of the activations' type or None. forward(x, residual=None)
    takes x [..., K] and adds `residual` [..., N] after the activation.
    """

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
        return wq_gemm(x, self.qweight, self.scales, self.zeros, bits=self.bits, g=self.group_size, zero=self.zero,
                       bias=self.bias, act=self.act, residual=residual)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bits=%d, group_size=%d, zero=%s, bias=%s" % (
            self.in_features, self.out_features, self.bits, self.group_size, self.zero, self.bias is not None)

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
        if self.gate is None:
            if 1 <= rows <= 8:
                return fused_ffn(x, self.w1, self.w3, act=self.act)
            return F.silu(F.linear(x, self.w1.to(x.dtype))) * F.linear(x, self.w3.to(x.dtype))
        g, u = self.gate, self.up
        if 1 <= rows <= 8:
            return fused_ffn(x, g.qweight, u.qweight, scales1=g.scales, zeros1=g.zeros, scales3=u.scales,
                             zeros3=u.zeros, bits=g.bits, g=g.group_size, zero=g.zero, act=self.act)
        if self.act != "silu":
            raise ValueError("FusedFFN: act=%r is fused_ffn's table SiLU, available for 1..8 rows only; x has %d"
                             % (self.act, rows))
        return F.silu(g(x)) * u(x)


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
        return gru_quant(xq.contiguous(), h0q.contiguous(), self.W, self.R, self.bw, self.br, self.params_text,
                         float_out=True)

    def forward(self, x, h0=None):
        t, n, _ = x.shape
        if h0 is None:
            h0 = torch.zeros(n, self.hidden_size, device=x.device)
        elif h0.dim() == 3:
            h0 = h0[0]
        _, y = self.forward_codes(self._quantize(x, self._x), self._quantize(h0, self._h))
        return y, y[-1:].clone()


__all__ = ["QuantLinear", "FusedFFN", "QuantGRU"]
