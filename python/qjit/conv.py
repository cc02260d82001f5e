"""qconv2d's weight tensors from a float conv2d weight, in torch.

qjit.qconv2d takes W as codes packed in the seed's OHWI byte layout (the
layout of tuner/reference/qconv2d.h's pack_qconv2d_weights) with one
float32 (scale, offset) per output channel and block of `block` input
channels, over the whole Kh×Kw window: w ≈ q·scale + offset.

  bits=8: qweight int8 [Co, Kh, Kw, Ci], each code's byte
  bits=4: qweight uint8 [Co, Kh, Kw, Ci/2], input channel 2j in the HIGH
          nibble and 2j+1 in the low one, each nibble code + 8

The seed gives no rule for making the codes; quantize_weights uses these
(float32, round half to even, DESIGN.md's rule where no seed defines one),
with qmax = 7 (int4) or 127 (int8):

  offset:    scale = (max − min)/(2·qmax + 1), offset = max − qmax·scale,
             so max maps to qmax and min to −qmax − 1 (scale 1 and offset max
             when max = min: every code 0, w = offset exactly)
  symmetric: scale = max|w|/qmax (1 when 0), offset 0, codes in −qmax..qmax

The codes only have to agree with their own scales and offsets, and
dequantize() gives the weights the kernel multiplies, the reference of a test.
"""

RULES = ("offset", "symmetric")


def _torch():
    import torch

    return torch


def _qmax(bits, who):
    if bits not in (4, 8):
        raise ValueError("%s: bits=%r; expected 4 or 8" % (who, bits))
    return (1 << (bits - 1)) - 1


def quantize_weights(w, bits=4, block=32, rule="offset"):
    """w: float tensor [Co, Ci, Kh, Kw] (any float dtype, any device). Returns (q int8 codes [Co, Ci, Kh, Kw]
    in −qmax−1..qmax, scales float32 [Co, Ci/block], offsets float32 [Co, Ci/block], zeros for symmetric)."""
    torch = _torch()
    who = "conv.quantize_weights"
    qmax = _qmax(bits, who)
    if rule not in RULES:
        raise ValueError("%s: rule %r; expected 'offset' or 'symmetric'" % (who, rule))
    if w.dim() != 4:
        raise ValueError("%s: w has shape %s; expected [Co, Ci, Kh, Kw]" % (who, list(w.shape)))
    co, ci, kh, kw = (int(s) for s in w.shape)
    if block <= 0 or ci % block:
        raise ValueError("%s: block=%d must divide Ci=%d" % (who, block, ci))
    if bits == 4 and ci % 2:
        raise ValueError("%s: Ci=%d is odd; int4 packs two input channels a byte (use bits=8)" % (who, ci))
    b = w.detach().float().reshape(co, ci // block, block * kh * kw)
    if rule == "offset":
        hi, lo = b.amax(-1), b.amin(-1)
        scale = (hi - lo) / float(2 * qmax + 1)
        flat = scale == 0
        scale = torch.where(flat, torch.ones_like(scale), scale)
        offset = torch.where(flat, hi, hi - scale * float(qmax))
        q = torch.round((b - offset[..., None]) / scale[..., None])  # half to even
    else:
        scale = b.abs().amax(-1) / float(qmax)
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        offset = torch.zeros_like(scale)
        q = torch.round(b / scale[..., None])
    q = q.clamp(-qmax - 1, qmax).to(torch.int8).reshape(co, ci, kh, kw)
    return q, scale.contiguous(), offset.contiguous()


def pack_codes(q, bits):
    """Codes [Co, Ci, Kh, Kw] (int8, −8..7 for bits=4) -> qconv2d's qweight: int8 [Co, Kh, Kw, Ci] (bits=8) or
    uint8 [Co, Kh, Kw, Ci/2] (bits=4, channel 2j in the high nibble, each code + 8)."""
    torch = _torch()
    qmax = _qmax(bits, "conv.pack_codes")
    if q.dim() != 4:
        raise ValueError("conv.pack_codes: q has shape %s; expected [Co, Ci, Kh, Kw]" % (list(q.shape),))
    if q.numel() and (int(q.min()) < -qmax - 1 or int(q.max()) > qmax):
        raise ValueError("conv.pack_codes: codes outside %d..%d for bits=%d" % (-qmax - 1, qmax, bits))
    ohwi = q.permute(0, 2, 3, 1).contiguous()
    if bits == 8:
        return ohwi.to(torch.int8)
    if ohwi.shape[-1] % 2:
        raise ValueError("conv.pack_codes: Ci=%d is odd; int4 packs two input channels a byte" % ohwi.shape[-1])
    u = (ohwi.to(torch.int16) + 8).to(torch.uint8)
    return ((u[..., 0::2] << 4) | u[..., 1::2]).contiguous()


def unpack_codes(qweight, bits):
    """The inverse of pack_codes: qconv2d's qweight -> codes int8 [Co, Ci, Kh, Kw]."""
    torch = _torch()
    _qmax(bits, "conv.unpack_codes")
    if qweight.dim() != 4:
        raise ValueError("conv.unpack_codes: qweight has shape %s; expected [Co, Kh, Kw, Ci or Ci/2]"
                         % (list(qweight.shape),))
    if bits == 8:
        ohwi = qweight.to(torch.int8)
    else:
        u = qweight.to(torch.int16)
        ohwi = torch.stack(((u >> 4) - 8, (u & 15) - 8), -1).flatten(-2).to(torch.int8)
    return ohwi.permute(0, 3, 1, 2).contiguous()


def pack_weights(w, bits=4, block=32, rule="offset"):
    """w: float [Co, Ci, Kh, Kw] -> (qweight, scales, offsets), qconv2d's weight arguments (module docstring)."""
    q, scales, offsets = quantize_weights(w, bits, block, rule)
    return pack_codes(q, bits), scales, offsets


def dequantize(qweight, scales, offsets, bits):
    """The weights qconv2d multiplies: float32 [Co, Ci, Kh, Kw] = q·scale + offset of each code's block."""
    q = unpack_codes(qweight, bits).float()
    block = q.shape[1] // scales.shape[1]
    s = scales.float().repeat_interleave(block, 1)[..., None, None]
    o = offsets.float().repeat_interleave(block, 1)[..., None, None]
    return q * s + o
