"""qjit's ops on PyTorch tensors.

Each op checks every tensor (dtype, shape, contiguity, device: qjit/_check.py)
before it touches the C library, allocates its output unless `out=` is given,
and launches on the current CUDA stream of the tensors' device
(torch.cuda.current_stream()), so it composes with streams and CUDA graph
capture like any torch op. The first call of a shape loads its kernel from the
cache (or compiles the default one): make one call of every shape before
capturing a graph, so that capture never compiles.

Up to three paths per op, because a cache hit must cost only a few µs more
from Python than from C++ (test_gpu.measure_launch_overhead):

- the signature cache (fused_ffn, wq_gemm, w8a8_gemm: the layers called with
  the same weights every step): the call's shapes, dtypes and plain arguments
  as a key; a key that passed the fast path before gives what it derived
  (sizes, dtype names, the output's shape) without comparing again, and each
  tensor's device and contiguity are checked (see _remember). Anything else
  goes on to
- the fast path: plain comparisons of the cheap tensor attributes,
  each read once (`dtype` looked up by identity in _check's map, `is_cuda`,
  `get_device()`, `shape`, `is_contiguous()`, `data_ptr()`), no string built
  and no torch.device made. When every argument is what it must be it
  allocates, marshals and launches. It decides nothing else: on the first
  doubt (a check that fails, an argument of another kind, a dtype not met
  yet, no rows, a tensor off the current device...) it falls through to
- the checked path (`_<op>_checked`), the reference: Checker's checks in
  order, which raise the TypeError or ValueError naming the tensor, or
  launch as the fast path would have. test_checks.py runs all three on the
  same arguments and compares what they launch.

A call's C arguments are one struct (but fp_lut's), packed into bytes
(_lib.packer) and handed to its C entry in place: a two-argument ctypes call,
where each argument costs a conversion.

Adding an op: a Structure and a STRUCT_ENTRIES line in qjit/_lib.py, here the
checked function (tensors checked with a Checker, output from _output,
launched with _launch; with fake=True it returns the output before any
launch) and the public one, whose fast path accepts only arguments the
checked one accepts, and its custom op in qjit/custom_ops.py, whose fake
implementation is the checked function with fake=True.
"""
import json

from . import _lib
from ._check import FLOAT, HALF, WORDS, TORCH_NAMES, Checker, dtype_name, numel
from ._check import _names_by_dtype as _DT  # dtype object -> qjit name, filled by every checked call

_bytes_cache = {}
_address_cache = {}
_B, _A = _bytes_cache, _address_cache  # short names for the fast paths' launches


def _b(text):
    """A str as the C string ctypes passes (None stays NULL); cached, as the same few strings recur."""
    if text is None:
        return None
    b = _bytes_cache.get(text)
    if b is None:
        b = _bytes_cache[text] = text.encode()
    return b


def _p(text):
    """The address of _b(text)'s bytes (0 for None), for a char* field of a packed struct.

    The bytes stay in _bytes_cache for the life of the process, so the address
    does too. Only for the few strings that recur (enums, dtype names):
    anything else would grow the cache.
    """
    if text is None:
        return 0
    a = _address_cache.get(text)
    if a is None:
        from ctypes import c_char_p, c_void_p, cast

        a = _address_cache[text] = cast(c_char_p(_b(text)), c_void_p).value
    return a


_torch_module = None


def _torch():
    global _torch_module
    if _torch_module is None:
        try:
            import torch
        except ImportError:
            raise ImportError("qjit's ops take torch tensors: install PyTorch (pip install torch)") from None
        _torch_module = torch
    return _torch_module


_cuda_calls = None  # (current device index, current raw stream of a device): bound on the first launch
_torch_dtypes = {}  # qjit dtype name -> torch dtype


def _bind_cuda():
    """torch's C functions behind torch.cuda.current_device() and current_stream(i).cuda_stream.

    The public ones cost µs a call: current_device() runs the lazy-init check,
    current_stream() builds a Stream object. The tensors of a call are CUDA
    tensors, so CUDA is initialised already; torch builds without the private
    names fall back to the public ones.
    """
    global _cuda_calls
    torch = _torch()
    get = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (lambda i: torch.cuda.current_stream(i).cuda_stream)
    _cuda_calls = get, raw
    return _cuda_calls


def _empty(shape, dtype, like):
    """A new tensor of `shape` and qjit dtype `dtype` on `like`'s device (like.new_empty: no torch.device built)."""
    td = _torch_dtypes.get(dtype)
    if td is None:
        torch = _torch()
        td = _torch_dtypes[dtype] = getattr(torch, TORCH_NAMES[dtype][len("torch."):])
    return like.new_empty(shape, dtype=td)


_functions = _lib._functions  # the declared C entries, filled when the library loads


def _launch(index, entry, *args):
    """Calls C entry `entry` with args + (the current stream of CUDA device `index`), on that device.

    The one place that calls the C library (tests replace it with a recorder).
    """
    get_device, stream = _cuda_calls or _bind_cuda()
    f = _functions.get(entry) or _lib.function(entry)
    if index == get_device():
        status = f(*args, stream(index))
    else:
        with _torch().cuda.device(index):
            status = f(*args, stream(index))
    if status:
        raise _lib.error_for(status)


# ---- the fast path's checks: True or a qjit dtype name when all is well, else False / None -----------------

# An exception in a fast path means an argument it does not handle: the checked path decides.
_FALLBACK = (AttributeError, TypeError, IndexError, ValueError, ZeroDivisionError)


def _dt(t, dev):
    """t's qjit dtype name when t is a contiguous CUDA tensor on device `dev`; None otherwise, and for a
    dtype no checked call has met yet."""
    if t.is_cuda and t.get_device() == dev and t.is_contiguous():
        return _DT.get(t.dtype)
    return None


def _is(t, dev, dtype, shape):
    """t is a contiguous CUDA tensor on device `dev`, of qjit dtype `dtype` and shape `shape` (a tuple)."""
    return t.shape == shape and _dt(t, dev) == dtype


def _none_or(t, dev, dtype, shape):
    """As _is, or t is None (an optional tensor not given)."""
    return t is None or _is(t, dev, dtype, shape)


# ---- the signature cache: a call like one checked before skips the comparisons --------------------------
#
# What a fast path derives from a call's tensor shapes and dtypes and its plain arguments (its signature:
# sizes, dtype names, the output's shape) is the same each time that signature comes back, and so is its
# verdict. The ops with a cache (fused_ffn, wq_gemm, w8a8_gemm: the layers of a model, called with the
# same weights every step) build the signature first and, when a call of it passed the fast path's
# checks before, take what was derived instead of comparing again. Every call still reads each tensor's
# shape and dtype (the key: one changed in place is another signature, checked anew) and checks each
# tensor's device and contiguity (_recall), which the key leaves out; so a call is refused exactly when
# the fast path would refuse it. Bounded: a cache is cleared when it reaches _SEEN_MAX signatures.
_SEEN_MAX = 1024
_ffn_seen, _wq_seen, _w8_seen = {}, {}, {}  # signature -> what the fast path derived


def _remember(seen, key, value):
    if len(seen) >= _SEEN_MAX:
        seen.clear()
    seen[key] = value


def _meta(t):
    """An optional tensor's part of a signature."""
    return None if t is None else (t.shape, t.dtype)


def _recall(seen, key, x, *tensors):
    """(what `seen` holds for signature `key`, x's device) when x and every tensor given are contiguous CUDA
    tensors on that device; (None, None) otherwise."""
    hit = seen.get(key)
    if hit is None:
        return None, None
    dev = x.get_device()
    return (hit, dev) if _here(dev, x, *tensors) else (None, None)


def _here(dev, *tensors):
    """Every tensor given (None: an optional one not passed) is a contiguous CUDA tensor on device `dev`."""
    for t in tensors:
        if t is not None and not (t.is_cuda and t.get_device() == dev and t.is_contiguous()):
            return False
    return True


_BITS = (2, 3, 4, 8)
_ZEROS = ("sym", "int", "float")
_ACTS = ("none", "relu", "relu6")
_FFN_ACTS = ("silu", "silu_lut", "silu_lut_seed")
# Packed structs (_lib.packer): bytes of the C struct, 4x cheaper than Structure(*fields). gru_quant's
# params are a new string each call, whose address costs more than the constructor saves: it builds a
# _lib.GruQuantArgs and passes bytes(a), as the checked paths do (`a` keeping alive the strings its char*
# fields point to until the call returns).
_dense_args = _lib.packer(_lib.DenseFfnArgs)
_wq_args = _lib.packer(_lib.WqGemmArgs)
_awq_args = _lib.packer(_lib.AwqDequantArgs)
_qffn_args = _lib.packer(_lib.QuantFfnArgs)
_w8_args = _lib.packer(_lib.W8a8GemmArgs)
_conv_args = _lib.packer(_lib.QConv2dArgs)


def _ptr(t):
    return t.data_ptr() if t is not None else 0


# The strings the fast paths pass, encoded (and their addresses taken) once: they index _bytes_cache and
# _address_cache directly. Each is one a fast path has validated (a dtype name, or a value of a choice).
for _text in FLOAT + HALF + ("mixed", "uint8", "int8", "int32") + _ZEROS + _ACTS + _FFN_ACTS + (
        "awq", "gptq", "offset", "symmetric", "nchw", "nhwc", "e4m3"):
    _p(_text)


def _output(c, out, dtype, shape, name="out"):
    """`out` checked against the op's result, or a new tensor of it."""
    if out is None:
        return _empty(shape, dtype, c.like)
    c.tensor(name, out, (dtype,), tuple(shape))
    return out


def _zeros_check(c, zero, zeros, groups, n, scales_dtype, name="zeros"):
    """wq_gemm's zeros for zero mode `zero`: none (sym), uint8 [K/g, N] (int), or the scales' type (float)."""
    if zero == "sym":
        if zeros is not None:
            c.fail("%s given but zero='sym' takes none" % name)
        return
    if zeros is None:
        c.fail("%s is None; zero=%r needs it ([K/g, N] %s)" % (name, zero, "uint8" if zero == "int" else scales_dtype))
    dtypes = ("uint8",) if zero == "int" else (scales_dtype,)
    c.tensor(name, zeros, dtypes, (groups, n), "[K/g, N] = [%d, %d]" % (groups, n))


def _quant_weight(c, suffix, qweight, scales, zeros, k, bits, g, zero):
    """One native-layout matrix (qweight, scales, zeros) of K rows of input; returns (N, scales dtype)."""
    sd = c.tensor("scales" + suffix, scales, HALF, ndim=2)
    n = int(scales.shape[1])
    c.divides("g", g, "K", k)
    c.shape_is("scales" + suffix, scales, (k // g, n), "[K/g, N] = [%d, %d]" % (k // g, n))
    c.tensor("qweight" + suffix, qweight, WORDS)
    c.numel_is("qweight" + suffix, qweight, k * n * bits // 32, "K·N·bits/32 (native layout, from qjit repack)")
    _zeros_check(c, zero, zeros, k // g, n, sd, "zeros" + suffix)
    return n, sd


def wq_gemm(x, qweight, scales, zeros=None, *, bits=4, g=128, zero="int", bias=None, act="none", residual=None,
            out=None):
    """y = act(x·Wᵀ + bias) (+ residual), W quantised in qjit's native layout.

    x: [..., K] fp16, bf16 or fp32 (M = the product of the leading dims).
    qweight: int32 or uint32 words, K·N·bits/32 of them (`qjit repack` or
    qjit.repack_checkpoint). scales: [K/g, N] fp16 or bf16. zeros: uint8
    [K/g, N] for zero="int", the scales' type for "float", None for "sym".
    bias: [N]; residual: [..., N] like y (may be `out` itself); both x's type.
    act: "none", "relu", "relu6". Returns y [..., N] of x's type.
    """
    hit = key = None
    try:
        key = (x.shape, x.dtype, qweight.shape, qweight.dtype, scales.shape, scales.dtype, _meta(zeros), _meta(bias),
               _meta(residual), _meta(out), bits, g, zero, act)
        hit, dev = _recall(_wq_seen, key, x, qweight, scales, zeros, bias, residual, out)
    except _FALLBACK:
        hit = key = None
    if hit is not None:
        k, n, m, ys, xd, sd = hit
    else:
        try:
            xs = x.shape
            k = xs[-1]
            xd = _DT.get(x.dtype) if x.is_cuda and x.is_contiguous() else None  # _dt(x, dev), one call fewer
            dev = x.get_device()
            ss = scales.shape
            n = ss[1]
            groups = k // g
            sd = _dt(scales, dev)
            ok = (xd in FLOAT and sd in HALF and len(ss) == 2 and ss[0] == groups and g > 0 and k % g == 0
                  and bits in _BITS and zero in _ZEROS and act in _ACTS
                  and _dt(qweight, dev) in WORDS and qweight.numel() == k * n * bits // 32
                  and (zeros is None if zero == "sym" else _is(zeros, dev, "uint8" if zero == "int" else sd, ss))
                  and _none_or(bias, dev, xd, (n,)))
            if ok:
                m = xs[0] if len(xs) == 2 else numel(xs[:-1])  # rows (torch.Size slices are slow: 2-D x needs none)
                ys = (m, n) if len(xs) == 2 else (*xs[:-1], n)
                ok = m > 0 and _none_or(residual, dev, xd, ys) and (out is None or _is(out, dev, xd, ys))
        except _FALLBACK:
            ok = False
        if not ok:
            return _wq_gemm_checked(x, qweight, scales, zeros, bits=bits, g=g, zero=zero, bias=bias, act=act,
                                    residual=residual, out=out)
        if key is not None:
            _remember(_wq_seen, key, (k, n, m, ys, xd, sd))
    y = out if out is not None else _empty(ys, xd, x)
    _launch(dev, "qjit_wq_gemm", _wq_args(k, n, bits, g, _A[zero], _A[sd], _A[xd], bias is not None,
                                          residual is not None, _A[act], x.data_ptr(), qweight.data_ptr(),
                                          scales.data_ptr(), _ptr(zeros), _ptr(bias), _ptr(residual), y.data_ptr(), m))
    return y


def _wq_gemm_checked(x, qweight, scales, zeros=None, *, bits=4, g=128, zero="int", bias=None, act="none", residual=None,
                     out=None, fake=False):
    """wq_gemm with Checker's checks: the reference, and the messages of every refusal."""
    c = Checker("wq_gemm", fake)
    xd = c.tensor("x", x, FLOAT)
    if len(x.shape) < 1:
        c.fail("x is a scalar; expected [..., K]")
    c.choice("zero", zero, ("sym", "int", "float"))
    c.choice("act", act, ("none", "relu", "relu6"))
    if bits not in (2, 3, 4, 8):
        c.fail("bits=%r; expected 2, 3, 4 or 8" % (bits,))
    k = int(x.shape[-1])
    n, sd = _quant_weight(c, "", qweight, scales, zeros, k, bits, g, zero)
    lead = tuple(x.shape[:-1])
    c.optional("bias", bias, (xd,), (n,), "[N] = [%d]" % n)
    c.optional("residual", residual, (xd,), lead + (n,))
    y = _output(c, out, xd, lead + (n,))
    m = numel(lead)
    if fake or m == 0:
        return y
    a = _lib.WqGemmArgs(k, n, bits, g, _b(zero), _b(sd), _b(xd), bias is not None, residual is not None, _b(act),
                        x.data_ptr(), qweight.data_ptr(), scales.data_ptr(),
                        zeros.data_ptr() if zeros is not None else None,
                        bias.data_ptr() if bias is not None else None,
                        residual.data_ptr() if residual is not None else None, y.data_ptr(), m)
    _launch(c.index, "qjit_wq_gemm", bytes(a))
    return y


def awq_dequant(qweight, qzeros, scales, *, layout="awq", symmetric=False, out_dtype=None, out=None):
    """Dense W [K, N] = (q − z)·s from AWQ or GPTQ packed int4, bit-exact.

    layout "awq": qweight int32 [K, N/8]; "gptq": [K/8, N]. qzeros int32
    [K/g, N/8] (None for symmetric gptq). scales [K/g, N] fp16 or bf16 (g is
    K / its rows). out_dtype: "fp16", "bf16" or None (the scales' type).
    """
    try:
        dev = qweight.get_device()
        qs, ss = qweight.shape, scales.shape
        rows, cols = qs
        k, n = (rows, cols * 8) if layout == "awq" else (rows * 8, cols)
        groups = ss[0]
        sd = _dt(scales, dev)
        od = out_dtype or sd
        ok = (layout in ("awq", "gptq") and _dt(qweight, dev) in WORDS and sd in HALF and od in HALF
              and ss == (groups, n) and groups > 0 and k % groups == 0
              and (qzeros is None and layout == "gptq" if symmetric
                   else _is(qzeros, dev, "int32", (groups, n // 8)) or _is(qzeros, dev, "uint32", (groups, n // 8)))
              and _none_or(out, dev, od, (k, n)))
    except _FALLBACK:
        ok = False
    if not ok:
        return _awq_dequant_checked(qweight, qzeros, scales, layout=layout, symmetric=symmetric, out_dtype=out_dtype,
                                    out=out)
    y = out if out is not None else _empty((k, n), od, qweight)
    _launch(dev, "qjit_awq_dequant", _awq_args(k, n, k // groups, _A[layout], int(bool(symmetric)), _A[sd], _A[od],
                                               qweight.data_ptr(), _ptr(qzeros), scales.data_ptr(), y.data_ptr()))
    return y


def _awq_dequant_checked(qweight, qzeros, scales, *, layout="awq", symmetric=False, out_dtype=None, out=None,
                         fake=False):
    """awq_dequant with Checker's checks: the reference, and the messages of every refusal."""
    c = Checker("awq_dequant", fake)
    c.choice("layout", layout, ("awq", "gptq"))
    if symmetric and layout != "gptq":
        c.fail("symmetric is for layout='gptq' only")
    c.tensor("qweight", qweight, WORDS, ndim=2)
    rows, cols = int(qweight.shape[0]), int(qweight.shape[1])
    k, n = (rows, cols * 8) if layout == "awq" else (rows * 8, cols)
    sd = c.tensor("scales", scales, HALF, ndim=2)
    groups = int(scales.shape[0])
    if groups <= 0 or k % groups:
        c.fail("scales has %d rows, which must divide K=%d (g = K / rows)" % (groups, k))
    c.shape_is("scales", scales, (groups, n), "[K/g, N] = [%d, %d]" % (groups, n))
    if symmetric:
        if qzeros is not None:
            c.fail("qzeros given but symmetric=True takes none")
    else:
        c.tensor("qzeros", qzeros, WORDS, (groups, n // 8), "[K/g, N/8] = [%d, %d]" % (groups, n // 8))
    od = out_dtype or sd
    c.choice("out_dtype", od, HALF)
    y = _output(c, out, od, (k, n))
    if fake:
        return y
    a = _lib.AwqDequantArgs(k, n, k // groups, _b(layout), int(bool(symmetric)), _b(sd), _b(od),
                            qweight.data_ptr(), qzeros.data_ptr() if qzeros is not None else None,
                            scales.data_ptr(), y.data_ptr())
    _launch(c.index, "qjit_awq_dequant", bytes(a))
    return y


def fused_ffn(x, w1, w3, *, scales1=None, zeros1=None, scales3=None, zeros3=None, bits=4, g=128, zero="int",
              act="silu", out=None):
    """y = SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ) for M = 1..8 rows of x [..., D].

    Dense (scales1 None): w1, w3 [H, D] of x's type, or fp16 with fp32 x
    ("mixed"). Quantized (scales1 given): w1, w3 as wq_gemm's native words,
    scales [D/g, H], zeros per `zero` as for wq_gemm. act: "silu", "silu_lut",
    "silu_lut_seed". Returns y [..., H] of x's type.
    """
    # The dense branch is the path of test_gpu.measure_launch_overhead (and of a decoder's FFN): its checks
    # are written out, as _here(dev, x, w1, w3, out), _dt(w1, dev) and _is(w3, dev, wd, ws) would make them,
    # each attribute read once, to save the calls. (torch's dtypes are singletons: `is` compares them.)
    dense = scales1 is None and scales3 is None and zeros1 is None and zeros3 is None
    hit = key = None
    try:
        if dense:
            key = (x.shape, x.dtype, w1.shape, w1.dtype, w3.shape, w3.dtype, act,
                   None if out is None else out.shape, None if out is None else out.dtype)
            hit = _ffn_seen.get(key)
            if hit is not None:
                dev = x.get_device()
                if not (x.is_cuda and x.is_contiguous() and w1.is_cuda and w1.get_device() == dev
                        and w1.is_contiguous() and w3.is_cuda and w3.get_device() == dev and w3.is_contiguous()
                        and (out is None or out.is_cuda and out.get_device() == dev and out.is_contiguous())):
                    hit = None
        else:
            key = (x.shape, x.dtype, w1.shape, w1.dtype, w3.shape, w3.dtype, scales1.shape, scales1.dtype,
                   scales3.shape, scales3.dtype, _meta(zeros1), _meta(zeros3), bits, g, zero, act, _meta(out))
            hit, dev = _recall(_ffn_seen, key, x, w1, w3, scales1, scales3, zeros1, zeros3, out)
    except _FALLBACK:
        hit = key = None
    if hit is not None:
        d, h, m, ys, xd, dtype = hit  # dtype: the dense call's type ("mixed" too), or the scales' type
    else:
        try:
            xs = x.shape
            d = xs[-1]
            xt = x.dtype
            xd = _DT.get(xt) if x.is_cuda and x.is_contiguous() else None
            dev = x.get_device()
            m = xs[0] if len(xs) == 2 else numel(xs[:-1])  # rows (torch.Size slices are slow: 2-D x needs none)
            ok = xd in FLOAT and 1 <= m <= 8 and act in _FFN_ACTS
            if ok and dense:
                ws = w1.shape
                h = ws[0]
                wt = w1.dtype
                wd = _DT.get(wt) if w1.is_cuda and w1.get_device() == dev and w1.is_contiguous() else None
                dtype = xd if wd == xd else "mixed" if xd == "fp32" and wd == "fp16" else None
                ok = (dtype is not None and len(ws) == 2 and ws[1] == d
                      and w3.shape == ws and w3.dtype is wt and w3.is_cuda and w3.get_device() == dev
                      and w3.is_contiguous())
            elif ok and scales1 is not None:  # quantized
                ss = scales1.shape
                h = ss[1]
                groups = d // g
                dtype = _dt(scales1, dev)
                words = d * h * bits // 32
                zd = None if zero == "sym" else "uint8" if zero == "int" else dtype
                ok = (dtype in HALF and bits in _BITS and zero in _ZEROS and g > 0 and d % g == 0
                      and ss == (groups, h) and _is(scales3, dev, dtype, ss)
                      and _dt(w1, dev) in WORDS and w1.numel() == words and _dt(w3, dev) in WORDS
                      and w3.numel() == words
                      and (zeros1 is None and zeros3 is None if zd is None
                           else _is(zeros1, dev, zd, ss) and _is(zeros3, dev, zd, ss)))
            else:
                ok = False  # dense weights with a scales3, zeros1 or zeros3: the checked path says which
            if ok:
                ys = (m, h) if len(xs) == 2 else (*xs[:-1], h)
                ok = out is None or (out.shape == ys and out.dtype is xt and out.is_cuda and out.get_device() == dev
                                     and out.is_contiguous())  # _is(out, dev, xd, ys), written out
        except _FALLBACK:
            ok = False
        if not ok:
            return _fused_ffn_checked(x, w1, w3, scales1=scales1, zeros1=zeros1, scales3=scales3, zeros3=zeros3,
                                      bits=bits, g=g, zero=zero, act=act, out=out)
        if key is not None:
            _remember(_ffn_seen, key, (d, h, m, ys, xd, dtype))
    y = out if out is not None else _empty(ys, xd, x)
    if dense:
        _launch(dev, "qjit_dense_ffn", _dense_args(d, h, m, _A[dtype], _A[act], x.data_ptr(), w1.data_ptr(),
                                                   w3.data_ptr(), y.data_ptr()))
    else:
        _launch(dev, "qjit_quant_ffn", _qffn_args(d, h, m, bits, g, _A[zero], _A[dtype], _A[xd], _A[act],
                                                  x.data_ptr(), w1.data_ptr(), scales1.data_ptr(), _ptr(zeros1),
                                                  w3.data_ptr(), scales3.data_ptr(), _ptr(zeros3), y.data_ptr()))
    return y


def _fused_ffn_checked(x, w1, w3, *, scales1=None, zeros1=None, scales3=None, zeros3=None, bits=4, g=128, zero="int",
                       act="silu", out=None, fake=False):
    """fused_ffn with Checker's checks: the reference, and the messages of every refusal."""
    c = Checker("fused_ffn", fake)
    xd = c.tensor("x", x, FLOAT)
    if len(x.shape) < 1:
        c.fail("x is a scalar; expected [..., D]")
    c.choice("act", act, ("silu", "silu_lut", "silu_lut_seed"))
    d = int(x.shape[-1])
    lead = tuple(x.shape[:-1])
    m = numel(lead)
    if not 1 <= m <= 8:
        c.fail("x has M = %d rows (shape %s); fused_ffn takes 1..8 (wq_gemm serves any M)" % (m, list(x.shape)))
    if scales1 is None:
        for name, v in (("scales3", scales3), ("zeros1", zeros1), ("zeros3", zeros3)):
            if v is not None:
                c.fail("%s given without scales1 (dense weights take no scales or zeros)" % name)
        wd = c.tensor("w1", w1, FLOAT, ndim=2)
        h = int(w1.shape[0])
        c.shape_is("w1", w1, (h, d), "[H, D] = [%d, %d]" % (h, d))
        c.tensor("w3", w3, (wd,), (h, d), "[H, D] = [%d, %d] like w1" % (h, d))
        if wd == xd:
            dtype = xd
        elif xd == "fp32" and wd == "fp16":
            dtype = "mixed"
        else:
            c.fail("x is %s and w1 is %s; expected the same type, or fp32 x with fp16 weights"
                   % (TORCH_NAMES[xd], TORCH_NAMES[wd]), TypeError)
        y = _output(c, out, xd, lead + (h,))
        if fake:
            return y
        a = _lib.DenseFfnArgs(d, h, m, _b(dtype), _b(act), x.data_ptr(), w1.data_ptr(), w3.data_ptr(), y.data_ptr())
        _launch(c.index, "qjit_dense_ffn", bytes(a))
        return y
    c.choice("zero", zero, ("sym", "int", "float"))
    if bits not in (2, 3, 4, 8):
        c.fail("bits=%r; expected 2, 3, 4 or 8" % (bits,))
    if scales3 is None:
        c.fail("scales3 is None but scales1 is given (quantized W1 and W3 both need scales)")
    h, sd = _quant_weight(c, "1", w1, scales1, zeros1, d, bits, g, zero)
    h3, sd3 = _quant_weight(c, "3", w3, scales3, zeros3, d, bits, g, zero)
    if h3 != h:
        c.fail("scales3 has N = %d columns but scales1 has %d (W1 and W3 are both [H, D])" % (h3, h))
    c.same_dtype("scales3", sd3, "scales1", sd)
    y = _output(c, out, xd, lead + (h,))
    if fake:
        return y
    a = _lib.QuantFfnArgs(d, h, m, bits, g, _b(zero), _b(sd), _b(xd), _b(act), x.data_ptr(),
                          w1.data_ptr(), scales1.data_ptr(), zeros1.data_ptr() if zeros1 is not None else None,
                          w3.data_ptr(), scales3.data_ptr(), zeros3.data_ptr() if zeros3 is not None else None,
                          y.data_ptr())
    _launch(c.index, "qjit_quant_ffn", bytes(a))
    return y


def fp_lut(x, fn="silu", *, cuts=None, out_dtype=None, out=None):
    """y = f(x) elementwise by an FP16 table with linear interpolation, bit-exact.

    fn: silu, gelu, gelu_tanh, sigmoid, tanh, exp, softplus, sin, cos. cuts:
    None ("default"), "seed", or 11 fp16 hex values "a:b:...". x fp16, bf16 or
    fp32, any shape; out_dtype: fp16, bf16, fp32 or None (x's type).
    """
    try:
        xs = x.shape
        xd = _DT.get(x.dtype) if x.is_cuda and x.is_contiguous() else None  # _dt(x, dev), one call fewer
        dev = x.get_device()
        od = out_dtype or xd
        n = x.numel()
        ok = (xd in FLOAT and od in FLOAT and n > 0 and type(fn) is str and (cuts is None or type(cuts) is str)
              and _none_or(out, dev, od, xs))
    except _FALLBACK:
        ok = False
    if not ok:
        return _fp_lut_checked(x, fn, cuts=cuts, out_dtype=out_dtype, out=out)
    y = out if out is not None else _empty(xs, od, x)
    _launch(dev, "qjit_fp_lut", _b(fn), n, _B[xd], _B[od], _b(cuts), x.data_ptr(), y.data_ptr())
    return y


def _fp_lut_checked(x, fn="silu", *, cuts=None, out_dtype=None, out=None, fake=False):
    """fp_lut with Checker's checks: the reference, and the messages of every refusal."""
    c = Checker("fp_lut", fake)
    xd = c.tensor("x", x, FLOAT)
    if not isinstance(fn, str):
        c.fail("fn must be a str, got %s" % type(fn).__name__, TypeError)
    od = out_dtype or xd
    c.choice("out_dtype", od, FLOAT)
    shape = tuple(x.shape)
    y = _output(c, out, od, shape)
    n = numel(shape)
    if fake or n == 0:
        return y
    _launch(c.index, "qjit_fp_lut", _b(fn), n, _b(xd), _b(od), _b(cuts), x.data_ptr(), y.data_ptr())
    return y


def gru_quant(x, h0, W, R, bw, br, params, *, float_out=False, out=None, out_float=None):
    """The fixed-point GRU forward over T steps, bit-exact with qjit's CPU reference.

    x int32 [T, N, C] and h0 int32 [N, H] (codes in the params' x and h
    ranges); W int8 [3H, C], R int8 [3H, H], bw and br int32 [3H] (gate rows
    u, r, n: `qjit gru calibrate --weights-out`). params: the layer's params
    document (JSON text or a dict). Returns y int32 [T, N, H], and with
    float_out=True (y, y_float) with y_float the dequantized float32 states.
    """
    try:
        dev = x.get_device()
        t, n, ci = x.shape
        hs = h0.shape
        h = hs[1]
        ys = (t, n, h)
        want_float = float_out or out_float is not None
        ok = (type(params) is str and _dt(x, dev) == "int32" and _is(h0, dev, "int32", (n, h))
              and _is(W, dev, "int8", (3 * h, ci)) and _is(R, dev, "int8", (3 * h, h))
              and _is(bw, dev, "int32", (3 * h,)) and _is(br, dev, "int32", (3 * h,))
              and _none_or(out, dev, "int32", ys) and _none_or(out_float, dev, "fp32", ys))
    except _FALLBACK:
        ok = False
    if not ok:
        return _gru_quant_checked(x, h0, W, R, bw, br, params, float_out=float_out, out=out, out_float=out_float)
    y = out if out is not None else _empty(ys, "int32", x)
    yf = None
    if want_float:
        yf = out_float if out_float is not None else _empty(ys, "fp32", x)
    text = params.encode()  # held until the call returns: the struct holds its address
    a = _lib.GruQuantArgs(t, n, ci, h, text, x.data_ptr(), h0.data_ptr(), W.data_ptr(), R.data_ptr(), bw.data_ptr(),
                          br.data_ptr(), y.data_ptr(), yf.data_ptr() if yf is not None else None)
    _launch(dev, "qjit_gru_quant", bytes(a))
    return (y, yf) if yf is not None else y


def _gru_quant_checked(x, h0, W, R, bw, br, params, *, float_out=False, out=None, out_float=None, fake=False):
    """gru_quant with Checker's checks: the reference, and the messages of every refusal."""
    c = Checker("gru_quant", fake)
    c.tensor("x", x, ("int32",), ndim=3)
    t, n, ci = x.shape
    c.tensor("h0", h0, ("int32",), ndim=2)
    h = int(h0.shape[1])
    c.shape_is("h0", h0, (n, h), "[N, H] = [%s, %d] (N from x)" % (n, h))  # %s: a traced N stays symbolic
    c.tensor("W", W, ("int8",), (3 * h, ci), "[3H, C] = [%d, %d]" % (3 * h, ci))
    c.tensor("R", R, ("int8",), (3 * h, h), "[3H, H] = [%d, %d]" % (3 * h, h))
    c.tensor("bw", bw, ("int32",), (3 * h,), "[3H] = [%d]" % (3 * h))
    c.tensor("br", br, ("int32",), (3 * h,), "[3H] = [%d]" % (3 * h))
    if isinstance(params, dict):
        params = json.dumps(params)
    elif not isinstance(params, str):
        c.fail("params must be the params document as a str or dict, got %s" % type(params).__name__, TypeError)
    y = _output(c, out, "int32", (t, n, h))
    yf = None
    if float_out or out_float is not None:
        yf = _output(c, out_float, "fp32", (t, n, h), "out_float")
    if fake:
        return (y, yf) if yf is not None else y
    a = _lib.GruQuantArgs(t, n, ci, h, params.encode(), x.data_ptr(), h0.data_ptr(), W.data_ptr(), R.data_ptr(),
                          bw.data_ptr(), br.data_ptr(), y.data_ptr(), yf.data_ptr() if yf is not None else None)
    _launch(c.index, "qjit_gru_quant", bytes(a))
    return (y, yf) if yf is not None else y


def w8a8_gemm(x, wq, w_scale, w_offset=None, w_sum=None, *, block=128, quant_a="offset", format=None, bias=None,
              act="none", out=None):
    """y = act(dequant(quant(x)·Wqᵀ) + bias), x quantized on the fly per row and block of K.

    x: [..., K] fp16, bf16 or fp32. quant_a: "offset" (seed 002's QuantA,
    x ≈ q·s + o) or "symmetric" (q·s). wq: int8 codes [N, K]; w_scale
    float32 [K/block, N]; w_offset float32 [K/block, N] for offset weights
    (None: symmetric weights); w_sum int32 [K/block, N], each block's Σ of
    codes (needed with quant_a="offset"). bias: [N] of x's type. act:
    "none", "relu", "relu6". Returns y [..., N] of x's type.

    format="e4m3" (the default when wq is torch.float8_e4m3fn; compute
    capability 8.9+): x quantized to FP8 e4m3 per row and block of 128 K
    (scale = amax/448), wq e4m3 codes [N, K] (torch.float8_e4m3fn, or uint8
    holding the same bytes), w_scale float32 [K/128, N/128], one per 128 x 128
    tile; block 128, N and K multiples of 128, no w_offset or w_sum, quant_a
    does not apply. qjit.w8a8.pack_weights(w, format="e4m3") makes them.
    """
    hit = key = None
    try:
        key = (x.shape, x.dtype, wq.shape, wq.dtype, w_scale.shape, w_scale.dtype, _meta(w_offset), _meta(w_sum),
               _meta(bias), _meta(out), block, quant_a, format, act)
        hit, dev = _recall(_w8_seen, key, x, wq, w_scale, w_offset, w_sum, bias, out)
    except _FALLBACK:
        hit = key = None
    if hit is not None:
        k, n, m, ys, xd, fp8 = hit
    else:
        try:
            xs = x.shape
            k = xs[-1]
            xd = _DT.get(x.dtype) if x.is_cuda and x.is_contiguous() else None  # _dt(x, dev), one call fewer
            dev = x.get_device()
            qs = wq.shape
            n = qs[0]
            wd = _dt(wq, dev)
            fp8 = format == "e4m3" or (format is None and wd == "e4m3")
            if fp8:
                ok = (xd in FLOAT and act in _ACTS and qs == (n, k) and wd in ("e4m3", "uint8") and block == 128
                      and k % 128 == 0 and n % 128 == 0 and _is(w_scale, dev, "fp32", (k // 128, n // 128))
                      and w_offset is None and w_sum is None and _none_or(bias, dev, xd, (n,)))
            else:
                param = (k // block, n)
                ok = (format in (None, "int8") and xd in FLOAT and quant_a in ("offset", "symmetric") and act in _ACTS
                      and qs == (n, k) and wd == "int8" and block > 0 and k % block == 0
                      and _is(w_scale, dev, "fp32", param) and _none_or(w_offset, dev, "fp32", param)
                      and (w_sum is not None or quant_a != "offset") and _none_or(w_sum, dev, "int32", param)
                      and _none_or(bias, dev, xd, (n,)))
            if ok:
                m = xs[0] if len(xs) == 2 else numel(xs[:-1])  # rows (torch.Size slices are slow: 2-D x needs none)
                ys = (m, n) if len(xs) == 2 else (*xs[:-1], n)
                ok = m > 0 and (out is None or _is(out, dev, xd, ys))
        except _FALLBACK:
            ok = False
        if not ok:
            return _w8a8_gemm_checked(x, wq, w_scale, w_offset, w_sum, block=block, quant_a=quant_a, format=format,
                                      bias=bias, act=act, out=out)
        if key is not None:
            _remember(_w8_seen, key, (k, n, m, ys, xd, fp8))
    y = out if out is not None else _empty(ys, xd, x)
    if fp8:
        qa = qw = 0  # (NULL: they do not apply to e4m3)
    else:
        qa, qw = _A[quant_a], _A["offset" if w_offset is not None else "symmetric"]
    _launch(dev, "qjit_w8a8_gemm", _w8_args(k, n, block, _A[xd], qa, qw, bias is not None, _A[act], x.data_ptr(),
                                            wq.data_ptr(), w_scale.data_ptr(), _ptr(w_offset),
                                            _ptr(w_sum) if quant_a == "offset" else 0, _ptr(bias), y.data_ptr(), m,
                                            _A["e4m3" if fp8 else "int8"]))
    return y


def _w8a8_gemm_checked(x, wq, w_scale, w_offset=None, w_sum=None, *, block=128, quant_a="offset", format=None,
                       bias=None, act="none", out=None, fake=False):
    """w8a8_gemm with Checker's checks: the reference, and the messages of every refusal."""
    c = Checker("w8a8_gemm", fake)
    xd = c.tensor("x", x, FLOAT)
    if len(x.shape) < 1:
        c.fail("x is a scalar; expected [..., K]")
    if format is None:  # from wq's dtype: float8_e4m3fn is e4m3
        format = "e4m3" if getattr(wq, "dtype", None) is not None and dtype_name(wq) == "e4m3" else "int8"
    fp8 = c.choice("format", format, ("int8", "e4m3")) == "e4m3"
    if not fp8:
        c.choice("quant_a", quant_a, ("offset", "symmetric"))
    c.choice("act", act, ("none", "relu", "relu6"))
    k = int(x.shape[-1])
    c.tensor("wq", wq, ("e4m3", "uint8") if fp8 else ("int8",), ndim=2)
    n = int(wq.shape[0])
    c.shape_is("wq", wq, (n, k), "[N, K] = [%d, %d]" % (n, k))
    if fp8:
        if block != 128:
            c.fail("block=%r; format='e4m3' takes block=128 (x's 1x128 and W's 128x128 scales)" % (block,))
        if n % 128 or k % 128:
            c.fail("wq has shape [%d, %d]; format='e4m3' needs N and K multiples of 128" % (n, k))
        c.tensor("w_scale", w_scale, ("fp32",), (k // 128, n // 128), "[K/128, N/128] = [%d, %d]" % (k // 128, n // 128))
        for name, t in (("w_offset", w_offset), ("w_sum", w_sum)):
            if t is not None:
                c.fail("%s given; format='e4m3' takes none (scales only)" % name)
    else:
        c.divides("block", block, "K", k)
        blocks = k // block
        param = "[K/block, N] = [%d, %d]" % (blocks, n)
        c.tensor("w_scale", w_scale, ("fp32",), (blocks, n), param)
        c.optional("w_offset", w_offset, ("fp32",), (blocks, n), param)
        if quant_a == "offset" and w_sum is None:
            c.fail("w_sum is None; quant_a='offset' needs it (int32 %s, Σ of each block's codes)" % param)
        c.optional("w_sum", w_sum, ("int32",), (blocks, n), param)
    lead = tuple(x.shape[:-1])
    c.optional("bias", bias, (xd,), (n,), "[N] = [%d]" % n)
    y = _output(c, out, xd, lead + (n,))
    m = numel(lead)
    if fake or m == 0:
        return y
    if fp8:
        quant_a = quant_w = None  # they do not apply to e4m3
    else:
        quant_w = "offset" if w_offset is not None else "symmetric"
    a = _lib.W8a8GemmArgs(k, n, block, _b(xd), _b(quant_a), _b(quant_w), bias is not None, _b(act),
                          x.data_ptr(), wq.data_ptr(), w_scale.data_ptr(),
                          w_offset.data_ptr() if w_offset is not None else None,
                          w_sum.data_ptr() if (w_sum is not None and quant_a == "offset") else None,
                          bias.data_ptr() if bias is not None else None, y.data_ptr(), m, _b(format))
    _launch(c.index, "qjit_w8a8_gemm", bytes(a))
    return y


def qconv2d(x, qweight, scales, offsets, *, bits=4, block=32, kernel=(3, 3), stride=(1, 1), padding=(0, 0),
            dilation=(1, 1), layout="nchw", bias=None, act="none", out=None):
    """conv2d of fp activations with weights quantized per block of input channels (seed 002's CONV_FpAInt4B).

    x: [N, C, H, W] (layout "nchw") or [N, H, W, C] ("nhwc"), fp16 or fp32,
    contiguous. qweight: the seed's packed OHWI bytes, int8 [Co, Kh, Kw, Ci]
    for bits=8 or uint8 [Co, Kh, Kw, Ci/2] for bits=4 (channel 2j in the high
    nibble, code + 8). scales, offsets: float32 [Co, Ci/block] (w = q·s + o).
    bias: float32 [Co]. act: "none", "relu", "relu6". Returns y in x's
    layout and type.
    """
    try:
        xd = _DT.get(x.dtype) if x.is_cuda and x.is_contiguous() else None  # _dt(x, dev), one call fewer
        dev = x.get_device()
        if layout == "nchw":
            nb, ci, h, w = x.shape
        else:
            nb, h, w, ci = x.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _pair(kernel), _pair(stride), _pair(padding), _pair(dilation)
        co = qweight.shape[0]
        param = (co, ci // block)
        oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        ys = (nb, co, oh, ow) if layout == "nchw" else (nb, oh, ow, co)
        ok = (xd in ("fp16", "fp32") and layout in ("nchw", "nhwc") and act in _ACTS and bits in (4, 8)
              and _is(qweight, dev, "int8" if bits == 8 else "uint8", (co, kh, kw, ci if bits == 8 else ci // 2))
              and block > 0 and ci % block == 0 and _is(scales, dev, "fp32", param)
              and _is(offsets, dev, "fp32", param) and _none_or(bias, dev, "fp32", (co,))
              and sh > 0 and sw > 0 and oh > 0 and ow > 0 and (out is None or _is(out, dev, xd, ys)))
    except _FALLBACK:
        ok = False
    if not ok:
        return _qconv2d_checked(x, qweight, scales, offsets, bits=bits, block=block, kernel=kernel, stride=stride,
                                padding=padding, dilation=dilation, layout=layout, bias=bias, act=act, out=out)
    y = out if out is not None else _empty(ys, xd, x)
    _launch(dev, "qjit_qconv2d", _conv_args(nb, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, _A[layout], bits, block,
                                            _A[xd], bias is not None, _A[act], x.data_ptr(), qweight.data_ptr(),
                                            scales.data_ptr(), offsets.data_ptr(), _ptr(bias), y.data_ptr()))
    return y


def _pair(v):
    """qconv2d's kernel, stride, padding or dilation as a pair of ints (fast path: an int or two ints)."""
    if type(v) is int:
        return v, v
    a, b = v
    if type(a) is not int or type(b) is not int:
        raise TypeError("not a pair of ints")
    return a, b


def _qconv2d_checked(x, qweight, scales, offsets, *, bits=4, block=32, kernel=(3, 3), stride=(1, 1), padding=(0, 0),
                     dilation=(1, 1), layout="nchw", bias=None, act="none", out=None, fake=False):
    """qconv2d with Checker's checks: the reference, and the messages of every refusal."""
    c = Checker("qconv2d", fake)
    xd = c.tensor("x", x, ("fp16", "fp32"), ndim=4)
    c.choice("layout", layout, ("nchw", "nhwc"))
    c.choice("act", act, ("none", "relu", "relu6"))
    if bits not in (4, 8):
        c.fail("bits=%r; expected 4 or 8" % (bits,))
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(int(e) for e in v)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = pair(kernel), pair(stride), pair(padding), pair(dilation)
    if layout == "nchw":
        nb, ci, h, w = x.shape
    else:
        nb, h, w, ci = x.shape
    c.tensor("qweight", qweight, ("int8",) if bits == 8 else ("uint8",), ndim=4)
    co = int(qweight.shape[0])
    per_row = ci if bits == 8 else ci // 2
    c.shape_is("qweight", qweight, (co, kh, kw, per_row), "[Co, Kh, Kw, %s] = [%d, %d, %d, %d]"
               % ("Ci" if bits == 8 else "Ci/2", co, kh, kw, per_row))
    c.divides("block", block, "Ci", ci)
    param = "[Co, Ci/block] = [%d, %d]" % (co, ci // block)
    c.tensor("scales", scales, ("fp32",), (co, ci // block), param)
    c.tensor("offsets", offsets, ("fp32",), (co, ci // block), param)
    c.optional("bias", bias, ("fp32",), (co,), "[Co] = [%d]" % co)
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1 if sh > 0 else 0
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1 if sw > 0 else 0
    if oh <= 0 or ow <= 0:
        c.fail("the output would be %d × %d (input %d × %d, kernel %d × %d, stride %s, padding %s, dilation %s)"
               % (oh, ow, h, w, kh, kw, (sh, sw), (ph, pw), (dh, dw)))
    y = _output(c, out, xd, (nb, co, oh, ow) if layout == "nchw" else (nb, oh, ow, co))
    if fake:
        return y
    a = _lib.QConv2dArgs(nb, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, _b(layout), bits, block, _b(xd),
                         bias is not None, _b(act), x.data_ptr(), qweight.data_ptr(), scales.data_ptr(),
                         offsets.data_ptr(), bias.data_ptr() if bias is not None else None, y.data_ptr())
    _launch(c.index, "qjit_qconv2d", bytes(a))
    return y
