"""wq_gemm's 4-bit weight tensors from a float weight, in torch: group-wise
quantization with integer zero points (AWQ's storage: w ≈ (q − z)·s) and
qjit's native layout, both ways.

quantize(w [N, K], g) quantizes each group of g inputs of an output row
(float32, DESIGN.md's rounding: half to even; q, z in 0..15):

  lo = min(min w, 0), hi = max(max w, 0)   (the range holds 0, so z fits)
  s  = fp32((hi − lo) / 15) rounded to the scales' type (fp16 or bf16);
       1 where that is 0 (an all-zero group, or one below the type's range)
  z  = clamp(round(−lo / s), 0, 15)
  q  = clamp(round(w / s) + z, 0, 15)

Every division is fp32 by a tensor (torch may turn a division by a Python
number into a multiplication by its reciprocal, which rounds differently).
Where a group holds both signs, which a trained weight's groups do, this
is AWQ's own rule (min and max of the group, integer zero point); widening
the range to 0 keeps z in range for a one-signed group instead of clipping
it.

pack(q [K, N]) lays the codes out as tuner/reference/wq_gemm.h defines the
native layout for 4 bits (what `qjit repack` makes of an AWQ checkpoint, bit
for bit; python/tests checks one against the other); unpack() inverts it and
dequantize() gives the weights the kernel multiplies. Only 4 bits: the other
widths have no Python packer.
"""

_LANES = 32


def _torch():
    import torch

    return torch


def _slots(torch, device):
    """slot(l) = l ^ ((l / 8) % 4), the position of lane l's words in its tile. An involution: it is its own inverse."""
    lane = torch.arange(_LANES, device=device)
    return lane ^ ((lane // 8) % 4)


def _check_kn(who, k, n):
    if k % 64 or n % 16:
        raise ValueError("%s: [K, N] = [%d, %d]; the native layout needs K a multiple of 64 and N of 16"
                         % (who, k, n))


def quantize(w, group_size=128, dtype=None):
    """w: float tensor [N, K] (an nn.Linear's weight). Returns (q uint8 [K, N], scales [K/g, N] of `dtype`
    (default: w's type if fp16 or bf16, else fp16), zeros uint8 [K/g, N]), by the rule in the module's docstring."""
    torch = _torch()
    if w.dim() != 2:
        raise ValueError("wq.quantize: w has shape %s; expected [N, K]" % (list(w.shape),))
    n, k = (int(s) for s in w.shape)
    g = group_size
    if g <= 0 or k % g:
        raise ValueError("wq.quantize: group_size=%d must divide K=%d" % (g, k))
    if dtype is None:
        dtype = w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16
    if dtype not in (torch.float16, torch.bfloat16):
        raise TypeError("wq.quantize: dtype %s; the scales are fp16 or bf16" % (dtype,))
    b = w.detach().float().reshape(n, k // g, g)
    lo, hi = b.amin(-1).clamp(max=0), b.amax(-1).clamp(min=0)
    s = ((hi - lo) / torch.full_like(hi, 15.0)).to(dtype)
    s = torch.where(s == 0, torch.ones_like(s), s)
    sf = s.float()
    z = torch.round(-lo / sf).clamp(0, 15)
    q = (torch.round(b / sf[..., None]) + z[..., None]).clamp(0, 15)
    t = lambda v: v.t().contiguous()  # noqa: E731  [N, K/g] -> [K/g, N]
    return t(q.reshape(n, k)).to(torch.uint8), t(s), t(z).to(torch.uint8)


def pack(q):
    """4-bit codes q [K, N] (0..15, any integer type) -> the native words, int32 [K·N/8]."""
    torch = _torch()
    k, n = (int(s) for s in q.shape)
    _check_kn("wq.pack", k, n)
    if q.numel() and (int(q.min()) < 0 or int(q.max()) > 15):
        raise ValueError("wq.pack: codes outside 0..15")
    # n = 16·nt + 8·a + gq and k = 64·kc + 16·t + 8·b + 2·s + e (wq_gemm.h: row gq + 8(r%2), k 16t + 2s + 8(r/2) + e
    # with r = a + 2b): lane 4·gq + t of tile (nt, kc) holds in word s, field a + 2b + 4e (4 bits each), that value.
    v = q.t().to(torch.int64).reshape(n // 16, 2, 8, k // 64, 4, 2, 4, 2)  # nt a gq kc t b s e
    v = v.permute(0, 3, 2, 4, 6, 7, 5, 1).reshape(-1, _LANES, 4, 8)  # tile, lane, word s, field e·4 + b·2 + a
    words = (v << (4 * torch.arange(8, device=q.device))).sum(-1)
    words = words[:, _slots(torch, q.device), :]  # word s of lane l at slot(l)·4 + s of its tile
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32).reshape(-1)


def unpack(words, k, n):
    """The inverse of pack: native words (int32 or uint32, K·N/8 of them) -> q uint8 [K, N]."""
    torch = _torch()
    _check_kn("wq.unpack", k, n)
    if words.numel() * 8 != k * n:
        raise ValueError("wq.unpack: %d words for [K, N] = [%d, %d]; expected K·N/8 = %d"
                         % (words.numel(), k, n, k * n // 8))
    w = words.reshape(-1, _LANES, 4).to(torch.int64) & 0xFFFFFFFF
    w = w[:, _slots(torch, words.device), :]  # back to lane order
    v = (w[..., None] >> (4 * torch.arange(8, device=words.device))) & 15  # tile, lane, s, field
    v = v.reshape(n // 16, k // 64, 8, 4, 4, 2, 2, 2)  # nt kc gq t s e b a
    return v.permute(0, 7, 2, 1, 3, 6, 4, 5).reshape(n, k).t().contiguous().to(torch.uint8)


def dequantize(qweight, scales, zeros=None, zero="int"):
    """The weights wq_gemm multiplies, float32 [N, K] (an nn.Linear's orientation): (q − z)·s for zero="int"
    and (q − 8)·s for "sym", both exact (the kernel rounds them once to x's type), (q − 8)·s + o for "float"
    (zeros holding the offsets o)."""
    groups, n = (int(v) for v in scales.shape)
    k = qweight.numel() * 8 // n
    q = unpack(qweight, k, n).float()
    g = k // groups
    rep = lambda v: v.float().repeat_interleave(g, 0)  # noqa: E731  [K/g, N] -> [K, N]
    if zero == "int":
        w = (q - rep(zeros)) * rep(scales)
    elif zero == "sym":
        w = (q - 8) * rep(scales)
    elif zero == "float":
        w = (q - 8) * rep(scales) + rep(zeros)
    else:
        raise ValueError("wq.dequantize: zero %r; expected 'int', 'sym' or 'float'" % (zero,))
    return w.t().contiguous()
