"""The ops' argument checks and how they marshal the C structs, without torch
or a GPU.

Tensors here are stand-ins (support.py) with the attributes the checks read;
they test the checks and the values handed to the C library, whose call
(qjit.ops._launch) and output allocation (qjit.ops._empty) are replaced by
recorders. The GPU machine's tests (test_gpu.py) run the same ops on real
torch tensors against PyTorch.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import qjit  # noqa: E402
from qjit import ops  # noqa: E402
from support import StandIn, T, decoded  # noqa: E402


class Recorder:
    """Replaces qjit.ops._launch and _empty: records each launch (device index, entry, args, a struct as
    support.Fields), allocates stand-ins."""

    def __init__(self):
        self.launches = []

    def launch(self, index, entry, *args):
        self.launches.append((index, entry, decoded(entry, args)))

    @staticmethod
    def empty(shape, dtype, like):
        from qjit._check import TORCH_NAMES

        return StandIn(TORCH_NAMES[dtype][len("torch."):], shape, str(like.device))


class OpChecks(unittest.TestCase):
    def setUp(self):
        self.rec = Recorder()
        self.saved = ops._launch, ops._empty
        ops._launch, ops._empty = self.rec.launch, self.rec.empty

    def tearDown(self):
        ops._launch, ops._empty = self.saved

    def refused(self, exc, words, fn, *args, **kwargs):
        """fn(*args) raises exc whose message holds every word, and launches nothing."""
        with self.assertRaises(exc) as cm:
            fn(*args, **kwargs)
        for w in words:
            self.assertIn(w, str(cm.exception))
        self.assertEqual(self.rec.launches, [], "a refused call must launch nothing")
        return str(cm.exception)

    # ---- wq_gemm ----
    def wq(self, **over):
        a = dict(x=T("float16", 3, 256), qweight=T("int32", 256 * 64 // 8), scales=T("float16", 2, 64),
                 zeros=T("uint8", 2, 64))
        a.update(over)
        return a

    def test_wq_gemm_marshals_its_struct(self):
        a = self.wq(x=T("float16", 2, 3, 256), bias=T("float16", 64))
        y = qjit.wq_gemm(**a)
        self.assertEqual(y.shape, (2, 3, 64))
        self.assertEqual(y.dtype, "torch.float16")
        (device, entry, (s,)), = self.rec.launches
        self.assertEqual(entry, "qjit_wq_gemm")
        self.assertEqual(device, 0)
        self.assertEqual((s.k, s.n, s.m, s.bits, s.g, s.bias, s.residual), (256, 64, 6, 4, 128, 1, 0))
        self.assertEqual((s.zero, s.scales_dtype, s.x_dtype, s.act), (b"int", b"fp16", b"fp16", b"none"))
        self.assertEqual((s.x, s.qweight, s.scales, s.zeros, s.bias_ptr, s.y),
                         (a["x"].data_ptr(), a["qweight"].data_ptr(), a["scales"].data_ptr(),
                          a["zeros"].data_ptr(), a["bias"].data_ptr(), y.data_ptr()))
        self.assertIsNone(s.residual_ptr)

    def test_wq_gemm_residual_into_out_and_sym(self):
        x = T("bfloat16", 1, 256)
        r = T("bfloat16", 1, 64)
        y = qjit.wq_gemm(x, T("int32", 256 * 64 // 8), T("bfloat16", 2, 64), zero="sym", residual=r, out=r)
        self.assertIs(y, r)
        s = self.rec.launches[0][2][0]
        self.assertEqual((s.zero, s.scales_dtype, s.x_dtype, s.residual), (b"sym", b"bf16", b"bf16", 1))
        self.assertIsNone(s.zeros)
        self.assertEqual(s.residual_ptr, s.y)

    def test_wq_gemm_no_rows_launches_nothing(self):
        y = qjit.wq_gemm(**self.wq(x=T("float16", 0, 256)))
        self.assertEqual(y.shape, (0, 64))
        self.assertEqual(self.rec.launches, [])

    def test_wq_gemm_refusals(self):
        f = qjit.wq_gemm
        self.refused(TypeError, ["wq_gemm: x", "torch.float64", "fp16"], f, **self.wq(x=T("float64", 3, 256)))
        self.refused(TypeError, ["x must be a torch.Tensor", "list"], f, **self.wq(x=[[1.0] * 256]))
        self.refused(ValueError, ["scales has shape [3, 64]", "[K/g, N] = [2, 64]"], f,
                     **self.wq(scales=T("float16", 3, 64)))
        self.refused(ValueError, ["qweight has 1024 elements", "2048"], f, **self.wq(qweight=T("int32", 1024)))
        self.refused(TypeError, ["qweight", "torch.int64"], f, **self.wq(qweight=T("int64", 2048)))
        self.refused(TypeError, ["zeros", "torch.int32", "uint8"], f, **self.wq(zeros=T("int32", 2, 64)))
        self.refused(ValueError, ["zeros is None", "zero='int'"], f, **self.wq(zeros=None))
        self.refused(ValueError, ["zeros given but zero='sym'"], f, zero="sym", **self.wq())
        self.refused(TypeError, ["zeros", "float16"], f, zero="float", **self.wq())  # float zeros: the scales' type
        self.refused(ValueError, ["x is on cpu", "CUDA"], f, **self.wq(x=T("float16", 3, 256, device="cpu")))
        self.refused(ValueError, ["scales is on cuda:1 but x is on cuda:0"], f,
                     **self.wq(scales=T("float16", 2, 64, device="cuda:1")))
        self.refused(ValueError, ["x is not contiguous", "stride (1, 3)", "x.contiguous()"], f,
                     **self.wq(x=T("float16", 256, 3).t()))
        self.refused(TypeError, ["bias", "torch.bfloat16"], f, bias=T("bfloat16", 64), **self.wq())
        self.refused(ValueError, ["bias has shape [32]"], f, bias=T("float16", 32), **self.wq())
        self.refused(ValueError, ["residual has shape [3, 32]", "[3, 64]"], f, residual=T("float16", 3, 32), **self.wq())
        self.refused(ValueError, ["out has shape [3, 65]"], f, out=T("float16", 3, 65), **self.wq())
        self.refused(TypeError, ["out has dtype torch.float32"], f, out=T("float32", 3, 64), **self.wq())
        self.refused(ValueError, ["g=96 must divide K", "256"], f, g=96, **self.wq())
        self.refused(ValueError, ["bits=5"], f, bits=5, **self.wq())
        self.refused(ValueError, ["act 'gelu'"], f, act="gelu", **self.wq())

    # ---- w8a8_gemm ----
    def w8(self, **over):
        a = dict(x=T("float16", 3, 256), wq=T("int8", 64, 256), w_scale=T("float32", 2, 64),
                 w_offset=T("float32", 2, 64), w_sum=T("int32", 2, 64))
        a.update(over)
        return a

    def test_w8a8_gemm_marshals_its_struct(self):
        a = self.w8(x=T("bfloat16", 2, 3, 256), bias=T("bfloat16", 64))
        y = qjit.w8a8_gemm(**a, act="relu6")
        self.assertEqual((y.shape, y.dtype), ((2, 3, 64), "torch.bfloat16"))
        (_, entry, (s,)), = self.rec.launches
        self.assertEqual(entry, "qjit_w8a8_gemm")
        self.assertEqual((s.k, s.n, s.block, s.m, s.bias), (256, 64, 128, 6, 1))
        self.assertEqual((s.x_dtype, s.quant_a, s.quant_w, s.act), (b"bf16", b"offset", b"offset", b"relu6"))
        self.assertEqual(s.format, b"int8")
        self.assertEqual((s.x, s.wq, s.w_scale, s.w_offset, s.w_sum, s.bias_ptr, s.y),
                         (a["x"].data_ptr(), a["wq"].data_ptr(), a["w_scale"].data_ptr(), a["w_offset"].data_ptr(),
                          a["w_sum"].data_ptr(), a["bias"].data_ptr(), y.data_ptr()))

    def test_w8a8_gemm_symmetric_forms_pass_no_offsets_or_sums(self):
        qjit.w8a8_gemm(T("float32", 1, 256), T("int8", 64, 256), T("float32", 4, 64), block=64,
                       quant_a="symmetric")
        s = self.rec.launches[0][2][0]
        self.assertEqual((s.quant_a, s.quant_w, s.block, s.x_dtype), (b"symmetric", b"symmetric", 64, b"fp32"))
        self.assertIsNone(s.w_offset)
        self.assertIsNone(s.w_sum)

    def test_w8a8_gemm_refusals(self):
        f = qjit.w8a8_gemm
        self.refused(TypeError, ["w8a8_gemm: wq", "torch.uint8", "int8"], f, **self.w8(wq=T("uint8", 64, 256)))
        self.refused(ValueError, ["wq has shape [64, 128]", "[N, K] = [64, 256]"], f, **self.w8(wq=T("int8", 64, 128)))
        self.refused(ValueError, ["block=96 must divide K=256"], f, block=96, **self.w8())
        self.refused(ValueError, ["w_scale has shape [4, 64]", "[K/block, N] = [2, 64]"], f,
                     **self.w8(w_scale=T("float32", 4, 64)))
        self.refused(TypeError, ["w_offset", "torch.float16", "fp32"], f, **self.w8(w_offset=T("float16", 2, 64)))
        self.refused(ValueError, ["w_sum is None", "quant_a='offset'"], f, **self.w8(w_sum=None))
        self.refused(ValueError, ["quant_a 'minmax'"], f, quant_a="minmax", **self.w8())
        self.refused(TypeError, ["bias", "torch.float32"], f, bias=T("float32", 64), **self.w8())
        self.refused(ValueError, ["w_sum has shape [2, 32]"], f, **self.w8(w_sum=T("int32", 2, 32)))
        self.refused(ValueError, ["x is not contiguous"], f, **self.w8(x=T("float16", 256, 3).t()))
        self.refused(ValueError, ["x is on cpu"], f, **self.w8(x=T("float16", 3, 256, device="cpu")))
        self.refused(ValueError, ["w_offset is not contiguous"], f, **self.w8(w_offset=T("float32", 64, 2).t()))
        self.refused(ValueError, ["out has shape [3, 32]"], f, out=T("float16", 3, 32), **self.w8())

    def test_w8a8_gemm_e4m3_from_the_codes_dtype_or_named(self):
        a = dict(x=T("float16", 3, 256), wq=T("float8_e4m3fn", 128, 256), w_scale=T("float32", 2, 1))
        y = qjit.w8a8_gemm(**a)
        self.assertEqual((y.shape, y.dtype), ((3, 128), "torch.float16"))
        s = self.rec.launches[0][2][0]
        # The C struct's format says e4m3; quant_a and quant_w, which do not apply, are NULL.
        self.assertEqual((s.format, s.quant_a, s.quant_w, s.block, s.k, s.n, s.m), (b"e4m3", None, None, 128, 256, 128, 3))
        self.assertEqual((s.wq, s.w_scale, s.w_offset, s.w_sum), (a["wq"].data_ptr(), a["w_scale"].data_ptr(), None, None))
        qjit.w8a8_gemm(a["x"], T("uint8", 128, 256), a["w_scale"], format="e4m3", quant_a="symmetric")
        self.assertEqual((self.rec.launches[1][2][0].format, self.rec.launches[1][2][0].quant_a), (b"e4m3", None))

    def test_w8a8_gemm_e4m3_refusals(self):
        f = qjit.w8a8_gemm
        x, wq, ws = T("float16", 3, 256), T("float8_e4m3fn", 128, 256), T("float32", 2, 1)
        self.refused(TypeError, ["wq", "torch.uint8", "int8"], f, x, T("uint8", 128, 256), ws)  # uint8: name the format
        self.refused(TypeError, ["wq", "torch.int8", "e4m3 (torch.float8_e4m3fn) or uint8"], f, x,
                     T("int8", 128, 256), ws, format="e4m3")
        self.refused(ValueError, ["format 'fp8'"], f, x, wq, ws, format="fp8")
        self.refused(ValueError, ["block=64", "format='e4m3' takes block=128"], f, x, wq, ws, block=64)
        self.refused(ValueError, ["format='e4m3' needs N and K multiples of 128"], f, x,
                     T("float8_e4m3fn", 96, 256), T("float32", 2, 1))
        self.refused(ValueError, ["w_scale has shape [2, 128]", "[K/128, N/128] = [2, 1]"], f, x, wq,
                     T("float32", 2, 128))
        self.refused(ValueError, ["w_offset given", "format='e4m3' takes none"], f, x, wq, ws, T("float32", 2, 128))
        self.refused(ValueError, ["w_sum given"], f, x, wq, ws, w_sum=T("int32", 2, 128))

    # ---- qconv2d ----
    def conv(self, **over):
        a = dict(x=T("float16", 1, 64, 14, 14), qweight=T("uint8", 32, 3, 3, 32), scales=T("float32", 32, 2),
                 offsets=T("float32", 32, 2))
        a.update(over)
        return a

    def test_qconv2d_marshals_its_struct(self):
        a = self.conv(bias=T("float32", 32))
        y = qjit.qconv2d(**a, padding=1, stride=(2, 1), act="relu")
        self.assertEqual((y.shape, y.dtype), ((1, 32, 7, 14), "torch.float16"))
        (_, entry, (s,)), = self.rec.launches
        self.assertEqual(entry, "qjit_qconv2d")
        self.assertEqual((s.n, s.ci, s.h, s.w, s.co, s.kh, s.kw), (1, 64, 14, 14, 32, 3, 3))
        self.assertEqual((s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dil_h, s.dil_w), (2, 1, 1, 1, 1, 1))
        self.assertEqual((s.layout, s.bits, s.block, s.x_dtype, s.bias, s.act), (b"nchw", 4, 32, b"fp16", 1, b"relu"))
        self.assertEqual((s.x, s.qweight, s.scales, s.offsets, s.bias_ptr, s.y),
                         (a["x"].data_ptr(), a["qweight"].data_ptr(), a["scales"].data_ptr(),
                          a["offsets"].data_ptr(), a["bias"].data_ptr(), y.data_ptr()))

    def test_qconv2d_nhwc_int8(self):
        y = qjit.qconv2d(T("float32", 2, 9, 9, 16), T("int8", 8, 1, 1, 16), T("float32", 8, 1), T("float32", 8, 1),
                         bits=8, block=16, kernel=1, layout="nhwc")
        self.assertEqual(y.shape, (2, 9, 9, 8))
        s = self.rec.launches[0][2][0]
        self.assertEqual((s.layout, s.bits, s.kh, s.kw, s.x_dtype), (b"nhwc", 8, 1, 1, b"fp32"))

    def test_qconv2d_refusals(self):
        f = qjit.qconv2d
        self.refused(ValueError, ["qweight has shape [32, 3, 3, 64]", "Ci/2"], f, **self.conv(qweight=T("uint8", 32, 3, 3, 64)))
        self.refused(TypeError, ["qweight", "torch.int8", "uint8"], f, **self.conv(qweight=T("int8", 32, 3, 3, 32)))
        self.refused(ValueError, ["block=48 must divide Ci=64"], f, block=48, **self.conv())
        self.refused(TypeError, ["x", "torch.bfloat16"], f, **self.conv(x=T("bfloat16", 1, 64, 14, 14)))
        self.refused(ValueError, ["output would be", "kernel 3 × 3"], f, dilation=8, **self.conv())
        self.refused(ValueError, ["scales has shape [32, 4]"], f, **self.conv(scales=T("float32", 32, 4)))
        self.refused(ValueError, ["offsets has shape [32, 1]"], f, **self.conv(offsets=T("float32", 32, 1)))
        self.refused(ValueError, ["x is not contiguous"], f, **self.conv(x=StandIn("float16", (1, 64, 14, 14),
                                                                                    stride=(1, 1, 896, 64))))
        self.refused(ValueError, ["bias has shape [16]"], f, bias=T("float32", 16), **self.conv())
        self.refused(ValueError, ["out has shape [1, 32, 14, 14]", "[1, 32, 12, 12]"], f,
                     out=T("float16", 1, 32, 14, 14), **self.conv())
        self.refused(ValueError, ["qweight is on cpu"], f, **self.conv(qweight=T("uint8", 32, 3, 3, 32, device="cpu")))

    # ---- awq_dequant ----
    def test_awq_dequant(self):
        qw, qz, sc = T("int32", 256, 8), T("int32", 2, 8), T("float16", 2, 64)
        y = qjit.awq_dequant(qw, qz, sc, out_dtype="bf16")
        self.assertEqual((y.shape, y.dtype), ((256, 64), "torch.bfloat16"))
        s = self.rec.launches[0][2][0]
        self.assertEqual((s.k, s.n, s.g, s.layout, s.symmetric, s.scales_dtype, s.out_dtype),
                         (256, 64, 128, b"awq", 0, b"fp16", b"bf16"))
        self.rec.launches.clear()
        y = qjit.awq_dequant(T("int32", 32, 64), None, sc, layout="gptq", symmetric=True)
        s = self.rec.launches[0][2][0]
        self.assertEqual((s.k, s.n, s.g, s.layout, s.symmetric, s.qzeros), (256, 64, 128, b"gptq", 1, None))
        self.rec.launches.clear()
        f = qjit.awq_dequant
        self.refused(ValueError, ["qzeros has shape [2, 64]", "[K/g, N/8] = [2, 8]"], f, qw, T("int32", 2, 64), sc)
        self.refused(TypeError, ["qweight", "torch.float16"], f, T("float16", 256, 8), qz, sc)
        self.refused(ValueError, ["symmetric is for layout='gptq'"], f, qw, None, sc, symmetric=True)
        self.refused(ValueError, ["scales has 3 rows", "K=256"], f, qw, qz, T("float16", 3, 64))
        self.refused(ValueError, ["scales has shape [2, 32]", "[K/g, N] = [2, 64]"], f, qw, qz, T("float16", 2, 32))
        self.refused(TypeError, ["qzeros", "torch.uint8"], f, qw, T("uint8", 2, 8), sc)
        self.refused(ValueError, ["out has shape [64, 256]"], f, qw, qz, sc, out=T("float16", 64, 256))
        self.refused(ValueError, ["qweight has 3 dimensions"], f, T("int32", 1, 256, 8), qz, sc)

    # ---- fused_ffn ----
    def test_fused_ffn_dense(self):
        x, w1, w3 = T("float16", 1, 256), T("float16", 512, 256), T("float16", 512, 256)
        y = qjit.fused_ffn(x, w1, w3)
        self.assertEqual(y.shape, (1, 512))
        _, entry, (s,) = self.rec.launches[0]
        self.assertEqual(entry, "qjit_dense_ffn")
        self.assertEqual(s.values(), (256, 512, 1, b"fp16", b"silu", x.data_ptr(), w1.data_ptr(), w3.data_ptr(),
                                      y.data_ptr()))
        self.rec.launches.clear()
        qjit.fused_ffn(T("float32", 4, 256), w1, w3, act="silu_lut")
        s = self.rec.launches[0][2][0]
        self.assertEqual((s.m, s.dtype, s.act), (4, b"mixed", b"silu_lut"))
        self.rec.launches.clear()
        f = qjit.fused_ffn
        self.refused(ValueError, ["M = 9 rows", "1..8"], f, T("float16", 9, 256), w1, w3)
        self.refused(ValueError, ["w3 has shape [256, 512]", "[H, D] = [512, 256]"], f, x, w1, w3.t())
        self.refused(TypeError, ["x is torch.float16 and w1 is torch.bfloat16"], f, x, T("bfloat16", 512, 256),
                     T("bfloat16", 512, 256))
        self.refused(ValueError, ["zeros1 given without scales1"], f, x, w1, w3, zeros1=T("uint8", 2, 512))
        self.refused(ValueError, ["w1 is on cuda:1 but x is on cuda:0"], f, x, T("float16", 512, 256, device="cuda:1"),
                     w3)
        self.refused(ValueError, ["out has shape [1, 256]"], f, x, w1, w3, out=T("float16", 1, 256))
        self.refused(ValueError, ["w3 has shape [256, 512]"], f, x, w1, T("float16", 256, 512))
        self.refused(ValueError, ["w3 is on cuda:1 but x is on cuda:0"], f, x, w1,
                     T("float16", 512, 256, device="cuda:1"))
        self.refused(TypeError, ["w3 has dtype torch.bfloat16"], f, x, w1, T("bfloat16", 512, 256))
        self.refused(ValueError, ["w3 is not contiguous"], f, x, w1, T("float16", 256, 512).t())
        self.refused(ValueError, ["x is not contiguous"], f, T("float16", 256, 2).t(), w1, w3)
        self.refused(ValueError, ["out is not contiguous"], f, T("float16", 2, 256), w1, w3,
                     out=T("float16", 512, 2).t())
        self.refused(ValueError, ["out is on cuda:1"], f, x, w1, w3, out=T("float16", 1, 512, device="cuda:1"))
        self.refused(TypeError, ["out has dtype torch.float32"], f, x, w1, w3, out=T("float32", 1, 512))
        self.refused(ValueError, ["act 'gelu'"], f, x, w1, w3, act="gelu")

    def test_fused_ffn_quantized(self):
        x = T("float16", 2, 256)
        w = dict(w1=T("int32", 256 * 512 // 8), w3=T("int32", 256 * 512 // 8), scales1=T("float16", 2, 512),
                 zeros1=T("uint8", 2, 512), scales3=T("float16", 2, 512), zeros3=T("uint8", 2, 512))
        y = qjit.fused_ffn(x, **w)
        self.assertEqual(y.shape, (2, 512))
        _, entry, (s,) = self.rec.launches[0]
        self.assertEqual(entry, "qjit_quant_ffn")
        self.assertEqual((s.d, s.h, s.m, s.bits, s.g, s.zero, s.act), (256, 512, 2, 4, 128, b"int", b"silu"))
        self.assertEqual((s.qweight3, s.zeros3, s.y), (w["w3"].data_ptr(), w["zeros3"].data_ptr(), y.data_ptr()))
        self.rec.launches.clear()
        f = qjit.fused_ffn
        self.refused(ValueError, ["scales3 is None"], f, x, **dict(w, scales3=None))
        self.refused(ValueError, ["zeros3 has shape [2, 256]"], f, x, **dict(w, zeros3=T("uint8", 2, 256)))
        self.refused(TypeError, ["scales3 has dtype torch.bfloat16 but scales1 has torch.float16"], f, x,
                     **dict(w, scales3=T("bfloat16", 2, 512)))
        self.refused(ValueError, ["qweight1 has 100 elements"], f, x, **dict(w, w1=T("int32", 100)))
        self.refused(TypeError, ["zeros3", "torch.int32", "uint8"], f, x, **dict(w, zeros3=T("int32", 2, 512)))
        narrow = dict(w, w3=T("int32", 256 * 256 // 8), scales3=T("float16", 2, 256), zeros3=T("uint8", 2, 256))
        self.refused(ValueError, ["scales3 has N = 256 columns"], f, x, **narrow)
        self.refused(ValueError, ["zeros3 given but zero='sym'"], f, x, zero="sym", **dict(w, zeros1=None))
        self.refused(ValueError, ["out has shape [2, 256]"], f, x, out=T("float16", 2, 256), **w)

    # ---- fp_lut, gru_quant ----
    def test_fp_lut(self):
        x = T("bfloat16", 4, 100)
        y = qjit.fp_lut(x, "gelu", out_dtype="fp32")
        self.assertEqual((y.shape, y.dtype), ((4, 100), "torch.float32"))
        self.assertEqual(self.rec.launches[0][1:], ("qjit_fp_lut", (b"gelu", 400, b"bf16", b"fp32", None,
                                                                     x.data_ptr(), y.data_ptr())))
        self.rec.launches.clear()
        self.refused(TypeError, ["fp_lut: x", "torch.int32"], qjit.fp_lut, T("int32", 4))
        self.refused(ValueError, ["out_dtype 'fp64'"], qjit.fp_lut, x, out_dtype="fp64")
        self.refused(ValueError, ["out has shape [400]"], qjit.fp_lut, x, out=T("bfloat16", 400))
        self.refused(ValueError, ["x is not contiguous"], qjit.fp_lut, T("float16", 100, 4).t())

    def test_gru_quant(self):
        t, n, c, h = 5, 2, 8, 16
        a = [T("int32", t, n, c), T("int32", n, h), T("int8", 3 * h, c), T("int8", 3 * h, h), T("int32", 3 * h),
             T("int32", 3 * h)]
        y, yf = qjit.gru_quant(*a, {"input_size": c}, float_out=True)
        self.assertEqual((y.shape, y.dtype, yf.dtype), ((t, n, h), "torch.int32", "torch.float32"))
        s = self.rec.launches[0][2][0]
        self.assertEqual((s.t, s.n, s.c, s.h, s.params), (t, n, c, h, b'{"input_size": 8}'))
        self.assertEqual(s.y_float, yf.data_ptr())
        self.rec.launches.clear()
        bad = list(a)
        bad[2] = T("int32", 3 * h, c)
        self.refused(TypeError, ["gru_quant: W", "torch.int32", "int8"], qjit.gru_quant, *bad, "{}")
        bad = list(a)
        bad[1] = T("int32", 3, h)
        self.refused(ValueError, ["h0 has shape [3, 16]", "N from x"], qjit.gru_quant, *bad, "{}")
        self.refused(TypeError, ["params must be"], qjit.gru_quant, *a, 7)
        for i, bad, words in ((2, T("int8", 3 * h, c + 1), "W has shape [48, 9]"),
                              (3, T("int8", 3 * h, c), "R has shape"),
                              (5, T("int32", 3 * h + 1), "br has shape [49]"),
                              (4, T("int32", 3 * h, device="cuda:1"), "bw is on cuda:1")):
            self.refused(ValueError, [words], qjit.gru_quant, *(a[:i] + [bad] + a[i + 1:]), "{}")
        self.refused(TypeError, ["out_float has dtype torch.float16"], qjit.gru_quant, *a, "{}",
                     out_float=T("float16", t, n, h))
        self.refused(TypeError, ["gru_quant: x has dtype torch.float32"], qjit.gru_quant, T("float32", t, n, c), *a[1:],
                     "{}")
        self.refused(ValueError, ["x is on cpu"], qjit.gru_quant, T("int32", t, n, c, device="cpu"), *a[1:], "{}")


def fields(args):
    """A launch's arguments with each struct as the tuple of its fields (what the C side reads)."""
    return tuple(tuple(getattr(a, f) for f, _ in a._fields_) if hasattr(a, "_fields_") else a for a in args)


class FastPath(unittest.TestCase):
    """Each op's fast path (qjit/ops.py) takes valid calls and launches what its checked path launches."""

    OPS = ("wq_gemm", "awq_dequant", "fused_ffn", "fp_lut", "gru_quant", "w8a8_gemm", "qconv2d")

    def setUp(self):
        self.rec = Recorder()
        self.checked_calls = []
        self.saved = {"_launch": ops._launch, "_empty": ops._empty}
        ops._launch, ops._empty = self.rec.launch, self.rec.empty
        for op in self.OPS:
            name = "_%s_checked" % op
            self.saved[name] = original = getattr(ops, name)

            def spy(*args, _op=op, _original=original, **kwargs):
                self.checked_calls.append(_op)
                return _original(*args, **kwargs)

            setattr(ops, name, spy)

    def tearDown(self):
        for name, f in self.saved.items():
            setattr(ops, name, f)

    def same(self, op, *args, **kwargs):
        """op(*args) three times (the first one may meet a dtype for the first time), the second on the fast
        path, the third from the signature cache (for the ops that have one), then the checked path on the
        same arguments: the same launches, the same outputs."""
        fast, checked = getattr(qjit, op), self.saved["_%s_checked" % op]
        fast(*args, **kwargs)
        self.rec.launches.clear()
        self.checked_calls.clear()
        ys = [fast(*args, **kwargs), fast(*args, **kwargs)]
        self.assertEqual(self.checked_calls, [], "%s%r took the checked path" % (op, kwargs))
        ys.append(checked(*args, **kwargs))
        launches = self.rec.launches
        self.assertEqual(len(launches), 3)
        self.assertEqual(len({(i, e) for i, e, _ in launches}), 1)
        outs = [y if isinstance(y, tuple) else (y,) for y in ys]
        self.assertEqual(len({tuple((o.shape, o.dtype) for o in os) for os in outs}), 1)
        given = [kwargs.get("out"), kwargs.get("out_float")]
        for os in outs:
            self.assertEqual([o for o in os if any(o is g for g in given)], [g for g in given if g is not None])
        # Outputs allocated by each call: the same but for their pointers.
        ptrs = {o.data_ptr(): "new output" for os in outs for o in os if not any(o is g for g in given)}
        norm = lambda a: tuple(tuple(ptrs.get(v, v) for v in f) if isinstance(f, tuple) else ptrs.get(f, f)
                               for f in fields(a))  # noqa: E731
        self.assertEqual(len({norm(a) for _, _, a in launches}), 1, "%s%r: %r" % (op, kwargs, launches))
        self.rec.launches.clear()

    def test_every_op(self):
        x, x2 = T("float16", 1, 256), T("float32", 4, 256)
        w1, w3 = T("float16", 512, 256), T("float16", 512, 256)
        self.same("fused_ffn", x, w1, w3)
        self.same("fused_ffn", x, w1, w3, out=T("float16", 1, 512), act="silu_lut_seed")
        self.same("fused_ffn", x2, w1, w3, act="silu_lut")  # mixed
        qw = T("int32", 256 * 512 // 8)
        for zero, zeros in (("int", T("uint8", 2, 512)), ("float", T("float16", 2, 512)), ("sym", None)):
            q = dict(scales1=T("float16", 2, 512), zeros1=zeros, scales3=T("float16", 2, 512), zeros3=zeros)
            self.same("fused_ffn", T("float16", 2, 256), qw, qw, zero=zero, **q)
            self.same("wq_gemm", T("float16", 3, 256), qw, q["scales1"], zeros, zero=zero, out=T("float16", 3, 512))
        r = T("bfloat16", 2, 3, 64)
        self.same("wq_gemm", T("bfloat16", 2, 3, 256), T("uint32", 256 * 64 // 8), T("bfloat16", 2, 64),
                  T("uint8", 2, 64), bias=T("bfloat16", 64), act="relu6", residual=r, out=r)
        self.same("wq_gemm", T("float32", 5, 256), T("int32", 256 * 64 * 8 // 32), T("float16", 4, 64),
                  T("uint8", 4, 64), bits=8, g=64)
        sc = T("float16", 2, 64)
        self.same("awq_dequant", T("int32", 256, 8), T("int32", 2, 8), sc)
        self.same("awq_dequant", T("int32", 256, 8), T("int32", 2, 8), sc, out_dtype="bf16",
                  out=T("bfloat16", 256, 64))
        self.same("awq_dequant", T("int32", 32, 64), None, sc, layout="gptq", symmetric=True)
        self.same("fp_lut", T("bfloat16", 4, 100), "gelu", out_dtype="fp32")
        self.same("fp_lut", T("float16", 7), "silu", cuts="seed", out=T("float16", 7))
        t, n, c, h = 5, 2, 8, 16
        g = [T("int32", t, n, c), T("int32", n, h), T("int8", 3 * h, c), T("int8", 3 * h, h), T("int32", 3 * h),
             T("int32", 3 * h)]
        self.same("gru_quant", *g, '{"input_size": 8}')
        self.same("gru_quant", *g, "{}", float_out=True, out=T("int32", t, n, h))
        w8 = dict(wq=T("int8", 64, 256), w_scale=T("float32", 2, 64))
        self.same("w8a8_gemm", T("float16", 3, 256), **w8, w_offset=T("float32", 2, 64), w_sum=T("int32", 2, 64),
                  bias=T("float16", 64), act="relu")
        self.same("w8a8_gemm", T("float32", 1, 256), **w8, quant_a="symmetric", out=T("float32", 1, 64))
        self.same("w8a8_gemm", T("float32", 1, 256), **w8, w_sum=T("int32", 2, 64), quant_a="symmetric")
        self.same("w8a8_gemm", T("bfloat16", 2, 3, 256), T("float8_e4m3fn", 128, 256), T("float32", 2, 1),
                  bias=T("bfloat16", 128), act="relu6")
        self.same("w8a8_gemm", T("float16", 5, 256), T("uint8", 128, 256), T("float32", 2, 1), format="e4m3",
                  out=T("float16", 5, 128))
        cv = (T("uint8", 32, 3, 3, 32), T("float32", 32, 2), T("float32", 32, 2))
        self.same("qconv2d", T("float16", 1, 64, 14, 14), *cv, padding=1, stride=(2, 1), bias=T("float32", 32))
        self.same("qconv2d", T("float32", 2, 9, 9, 16), T("int8", 8, 1, 1, 16), T("float32", 8, 1),
                  T("float32", 8, 1), bits=8, block=16, kernel=1, layout="nhwc", out=T("float32", 2, 9, 9, 8))

    def test_what_the_fast_path_leaves_to_the_checked_one(self):
        """Calls the fast path does not decide take the checked path, which still launches (or returns) as before."""
        x, w = T("float16", 1, 256), T("float16", 512, 256)
        self.same("fused_ffn", x, w, w)  # every dtype met: what follows is not a first meeting
        cases = [
            ("wq_gemm", (T("float16", 0, 256), T("int32", 256 * 64 // 8), T("float16", 2, 64), T("uint8", 2, 64)), {}),
            ("gru_quant", (T("int32", 5, 2, 8), T("int32", 2, 16), T("int8", 48, 8), T("int8", 48, 16),
                           T("int32", 48), T("int32", 48), {"input_size": 8}), {}),  # params as a dict
            ("fp_lut", (T("float16", 0, 4),), {}),  # no elements
            ("qconv2d", (T("float16", 1, 64, 14, 14), T("uint8", 32, 3, 3, 32), T("float32", 32, 2),
                         T("float32", 32, 2)), {"padding": (1.0, 1)}),  # not an int
        ]
        for op, args, kwargs in cases:
            self.checked_calls.clear()
            getattr(qjit, op)(*args, **kwargs)
            self.assertEqual(self.checked_calls, [op])
        self.assertEqual([e for _, e, _ in self.rec.launches], ["qjit_gru_quant", "qjit_qconv2d"])


class SignatureCache(unittest.TestCase):
    """A call whose signature (shapes, dtypes, plain arguments) passed before skips the fast path's comparisons
    (qjit/ops.py), and is still refused for a tensor on another device or not contiguous; another dtype or
    shape is another signature, checked anew."""

    def setUp(self):
        self.rec = Recorder()
        self.saved = ops._launch, ops._empty
        ops._launch, ops._empty = self.rec.launch, self.rec.empty
        for seen in (ops._ffn_seen, ops._wq_seen, ops._w8_seen):
            seen.clear()

    def tearDown(self):
        ops._launch, ops._empty = self.saved

    def cases(self):
        """(op, positional tensors, keyword arguments): one call of each op that has a cache."""
        qw = T("int32", 256 * 512 // 8)
        q = dict(scales1=T("float16", 2, 512), zeros1=T("uint8", 2, 512), scales3=T("float16", 2, 512),
                 zeros3=T("uint8", 2, 512))
        return [
            ("fused_ffn", [T("float16", 1, 256), T("float16", 512, 256), T("float16", 512, 256)],
             dict(out=T("float16", 1, 512))),
            ("fused_ffn", [T("float16", 2, 256), qw, qw], q),
            ("wq_gemm", [T("float16", 3, 256), T("int32", 256 * 64 // 8), T("float16", 2, 64), T("uint8", 2, 64)],
             dict(bias=T("float16", 64))),
            ("w8a8_gemm", [T("float32", 4, 256), T("int8", 64, 256), T("float32", 2, 64)],
             dict(w_offset=T("float32", 2, 64), w_sum=T("int32", 2, 64), out=T("float32", 4, 64))),
        ]

    def test_cached_signatures_still_check_devices_and_strides(self):
        for op, args, kwargs in self.cases():
            f = getattr(qjit, op)
            f(*args, **kwargs)
            f(*args, **kwargs)  # the signature is known from here on
            self.rec.launches.clear()
            names = ["x", {"fused_ffn": "qweight1" if "scales1" in kwargs else "w1", "wq_gemm": "qweight",
                           "w8a8_gemm": "wq"}[op]]
            for i, name in enumerate(names):
                t = args[i]
                moved = StandIn(t.dtype[len("torch."):], t.shape, "cuda:1")
                with self.assertRaisesRegex(ValueError, "%s is on cuda:1" % name):
                    f(*(args[:i] + [moved] + args[i + 1:]), **kwargs)
                if len(t.shape) == 2 and min(t.shape) > 1:  # same shape, transposed strides
                    strided = StandIn(t.dtype[len("torch."):], t.shape, "cuda:0", (1, t.shape[0]))
                    with self.assertRaisesRegex(ValueError, "%s is not contiguous" % name):
                        f(*(args[:i] + [strided] + args[i + 1:]), **kwargs)
            for name, t in kwargs.items():
                moved = StandIn(t.dtype[len("torch."):], t.shape, "cuda:1")
                with self.assertRaisesRegex(ValueError, "is on cuda:1"):
                    f(*args, **dict(kwargs, **{name: moved}))
            x = args[0]
            with self.assertRaisesRegex(TypeError, "x has dtype torch.float64"):
                f(*([StandIn("float64", x.shape)] + args[1:]), **kwargs)
            self.assertEqual(self.rec.launches, [], op)
            f(*args, **kwargs)
            self.assertEqual(len(self.rec.launches), 1)
            self.rec.launches.clear()

    def test_bounded(self):
        saved = ops._SEEN_MAX
        ops._SEEN_MAX = 3
        try:
            for rows in range(1, 9):
                qjit.fused_ffn(T("float16", rows, 256), T("float16", 512, 256), T("float16", 512, 256))
                self.assertLessEqual(len(ops._ffn_seen), 3)
        finally:
            ops._SEEN_MAX = saved
        self.assertEqual(len(self.rec.launches), 8)


class Launch(unittest.TestCase):
    """qjit.ops._launch on a stand-in torch: the current device's stream, another device under torch.cuda.device."""

    def setUp(self):
        self.log = []
        log = self.log

        class FakeC:
            current = 0

            @staticmethod
            def _cuda_getDevice():
                return FakeC.current

            @staticmethod
            def _cuda_getCurrentRawStream(i):
                return 1000 + i + 10 * FakeC.current

        class Device:
            def __init__(self, i):
                self.i = i

            def __enter__(self):
                self.prev, FakeC.current = FakeC.current, self.i

            def __exit__(self, *exc):
                FakeC.current = self.prev

        class FakeTorch:
            _C = FakeC

            class cuda:
                device = Device

        def entry(*args):
            log.append(args)
            return args[0]  # the status: the first argument

        self.saved = ops._torch_module, ops._cuda_calls, _lib_functions().get("qjit_test_entry")
        ops._torch_module, ops._cuda_calls = FakeTorch, None
        _lib_functions()["qjit_test_entry"] = entry

    def tearDown(self):
        ops._torch_module, ops._cuda_calls = self.saved[:2]
        _lib_functions().pop("qjit_test_entry")

    def test_stream_device_and_status(self):
        ops._launch(0, "qjit_test_entry", 0, "a")
        ops._launch(2, "qjit_test_entry", 0, "b")  # on device 2 while it runs: its stream, seen from device 2
        self.assertEqual(self.log, [(0, "a", 1000), (0, "b", 1022)])
        saved = ops._lib.error_for
        ops._lib.error_for = lambda status: qjit.QjitError("status %d" % status)
        try:
            with self.assertRaisesRegex(qjit.QjitError, "status 5"):
                ops._launch(0, "qjit_test_entry", 5)
        finally:
            ops._lib.error_for = saved


def _lib_functions():
    from qjit import _lib

    return _lib._functions


class WithoutTorch(unittest.TestCase):
    def test_import_needs_no_torch_and_nn_says_why(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            with self.assertRaises(ImportError) as cm:
                qjit.nn
            self.assertIn("needs PyTorch", str(cm.exception))
            # A valid call passes every check, then needs torch for its stream.
            with self.assertRaises(ImportError) as cm:
                qjit.fp_lut(T("float16", 8), out=T("float16", 8))
            self.assertIn("install PyTorch", str(cm.exception))
        else:
            self.skipTest("torch is installed here")


if __name__ == "__main__":
    unittest.main()
