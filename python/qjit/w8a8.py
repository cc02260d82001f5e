"""w8a8_gemm's weight tensors from a float weight, in torch.

qjit.w8a8_gemm takes W as int8 codes [N, K] with float32 scales (and
offsets) and int32 code sums per block of K and column, block-major
[K/block, N]. pack_weights makes them from a float W [N, K] with the block
rules of tuner/reference/w8a8_quant.h:

  offset:    scale = (max − min)/255, offset = max − 127·scale (scale 1 and
             offset max when |scale| ≤ 1e-5), q = round((w − offset)/scale)
             half away from zero, clamped to [−128, 127]; w ≈ q·scale + offset
  symmetric: scale = max|w|/127 (1 when 0), q = round half to even of w/scale

The codes only have to agree with their own scales, offsets and sums, which
they do exactly: the sums are computed from the codes. (torch rounds
offset = max − 127·scale twice where the C++ quantizer fuses it; a code may
then differ from the CPU quantizer's in a rare tie, never from its own
parameters.)

format="e4m3" packs W for w8a8_gemm's FP8 format as
tuner/reference/w8a8_fp8.h does (quantize_fp8_tiles), bit for bit: per
128 × 128 tile, scale = amax/448 (1 when amax is 0) and q = the e4m3 code of
w/scale, rounded to nearest even (w/scale never passes 448 by more than a
rounding, so torch's cast, which saturates nothing, meets no overflow). Every
division divides by a tensor: torch may turn a division by a Python number
into a multiplication by its reciprocal, which rounds differently.
"""


def pack_weights(w, block=128, rule="offset", format="int8"):
    """w: float tensor [N, K] (any float dtype, any device). Returns
    (wq int8 [N, K], w_scale float32 [K/block, N], w_offset float32
    [K/block, N] or None for rule="symmetric", w_sum int32 [K/block, N]).

    format="e4m3": (wq torch.float8_e4m3fn [N, K], w_scale float32
    [K/128, N/128], None, None); block must be 128 and N, K multiples of 128;
    rule does not apply. `wq.view(torch.uint8)` is the same codes as bytes."""
    import torch

    if format == "e4m3":
        return _pack_e4m3(w, block)
    if format != "int8":
        raise ValueError("w8a8.pack_weights: format %r; expected 'int8' or 'e4m3'" % (format,))
    if rule not in ("offset", "symmetric"):
        raise ValueError("w8a8.pack_weights: rule %r; expected 'offset' or 'symmetric'" % (rule,))
    if w.dim() != 2:
        raise ValueError("w8a8.pack_weights: w has shape %s; expected [N, K]" % (list(w.shape),))
    n, k = (int(s) for s in w.shape)
    if not 32 <= block <= 512 or k % block:
        raise ValueError("w8a8.pack_weights: block=%d; expected 32..512 dividing K=%d" % (block, k))
    b = w.float().reshape(n, k // block, block)
    if rule == "offset":
        hi, lo = b.amax(-1), b.amin(-1)
        scale = (hi - lo) / 255.0
        small = scale.abs() <= 1e-5
        offset = torch.where(small, hi, hi - scale * 127.0)
        scale = torch.where(small, torch.ones_like(scale), scale)
        v = (b - offset[..., None]) / scale[..., None]
        q = torch.sign(v) * torch.floor(v.abs() + 0.5)  # half away from zero, as roundf
    else:
        scale = b.abs().amax(-1) / 127.0
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        offset = None
        q = torch.round(b / scale[..., None])  # half to even
    q = q.clamp(-128, 127).to(torch.int8)
    sums = q.to(torch.int32).sum(-1)
    wq = q.reshape(n, k).contiguous()
    t = lambda v: v.t().contiguous()  # [N, K/block] -> block-major [K/block, N]
    return wq, t(scale), (t(offset) if offset is not None else None), t(sums).to(torch.int32)


def _pack_e4m3(w, block):
    import torch

    if w.dim() != 2:
        raise ValueError("w8a8.pack_weights: w has shape %s; expected [N, K]" % (list(w.shape),))
    n, k = (int(s) for s in w.shape)
    if block != 128 or n % 128 or k % 128:
        raise ValueError("w8a8.pack_weights: format='e4m3' takes block=128 and N, K multiples of 128; "
                         "got block=%d, [N, K] = [%d, %d]" % (block, n, k))
    t = w.float().reshape(n // 128, 128, k // 128, 128)
    amax = t.abs().amax(dim=(1, 3))  # [N/128, K/128]
    scale = amax / torch.full_like(amax, 448.0)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = (t / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    return q.reshape(n, k).contiguous(), scale.t().contiguous(), None, None


def dequantize(wq, w_scale, w_offset=None):
    """The weights w8a8_gemm multiplies: float32 W [N, K] = q·scale (+ offset) of each code's block
    (w_scale, w_offset block-major [K/block, N] as pack_weights returns them; None: symmetric), or for e4m3
    codes (torch.float8_e4m3fn) code·scale of each 128 × 128 tile (w_scale [K/128, N/128])."""
    n, k = (int(s) for s in wq.shape)
    if str(wq.dtype) == "torch.float8_e4m3fn":
        t = wq.float().reshape(n // 128, 128, k // 128, 128) * w_scale.float().t()[:, None, :, None]
        return t.reshape(n, k)
    blocks = int(w_scale.shape[0])
    q = wq.float().reshape(n, blocks, k // blocks)
    w = q * w_scale.float().t()[..., None]
    if w_offset is not None:
        w = w + w_offset.float().t()[..., None]
    return w.reshape(n, k)
