"""qjit.nn's W8A8Linear, QConv2d and QuantLinear.from_float, and the weight
packers behind them (qjit.w8a8, qjit.conv, qjit.wq), on CPU tensors: run where
torch imports, skipped in CI (no torch). The GPU side, against PyTorch, is
test_gpu.py's GpuModules.

- qjit.wq.quantize equals a plain Python reference of its rule (fp32
  arithmetic, scales rounded to fp16 or bf16, round half to even), bit for
  bit, on groups chosen for their edges (all zero, one-signed, exact ties);
  qjit.wq.pack against an independent decoder of the native layout (and
  test_model.py against the `qjit repack` command's words); QuantLinear.from_float's
  buffers and dequantized_weight, W8A8Linear's e4m3 format,
- the qconv2d packer's bytes equal those tests/test_qconv2d.cpp asserts for
  the C++ packer (pack_qconv2d_weights) on the same codes; round trips; the
  quantization rules (error within half a step, range, degenerate blocks),
- each module's buffers, state_dict round trip and from_float packing,
- the refusals, before anything launches,
- forward's launch (CPU tensors answering as cuda:0, support.TorchAsCuda):
  the op, its fields and pointers; QConv2d's NCHW and channels_last paths;
  a buffer replaced by a Parameter still read.
"""
import os
import struct
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import qjit  # noqa: E402
from support import TorchAsCuda  # noqa: E402

try:
    import torch
    from qjit import conv, w8a8, wq
except ImportError:
    torch = None

# The example of tests/test_qconv2d.cpp ("the fixed example Python's packer is checked against"):
# codes [Co=2][Ci=4][Kh=1][Kw=2], code i = i·5 mod 16 − 8 (int4) and i·37 mod 256 − 128 (int8).
CPP_INT4_BYTES = [10, 78, 95, 147, 130, 198, 215, 27]
CPP_INT8_BYTES = [128, 202, 20, 94, 165, 239, 57, 131, 168, 242, 60, 134, 205, 23, 97, 171]


@unittest.skipUnless(torch, "needs torch")
class ConvPacking(unittest.TestCase):
    def test_the_bytes_of_the_cpp_packer(self):
        q4 = torch.tensor([i * 5 % 16 - 8 for i in range(16)], dtype=torch.int8).reshape(2, 4, 1, 2)
        q8 = torch.tensor([i * 37 % 256 - 128 for i in range(16)], dtype=torch.int8).reshape(2, 4, 1, 2)
        p4, p8 = conv.pack_codes(q4, 4), conv.pack_codes(q8, 8)
        self.assertEqual((p4.dtype, tuple(p4.shape)), (torch.uint8, (2, 1, 2, 2)))
        self.assertEqual((p8.dtype, tuple(p8.shape)), (torch.int8, (2, 1, 2, 4)))
        self.assertEqual(p4.flatten().tolist(), CPP_INT4_BYTES)
        self.assertEqual([b & 255 for b in p8.flatten().tolist()], CPP_INT8_BYTES)

    def test_round_trip_and_where_each_code_lands(self):
        gen = torch.Generator().manual_seed(3)
        co, ci, kh, kw = 5, 16, 3, 2
        for bits in (4, 8):
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1))
            q = torch.randint(lo, hi, (co, ci, kh, kw), generator=gen, dtype=torch.int8)
            packed = conv.pack_codes(q, bits)
            self.assertTrue(torch.equal(conv.unpack_codes(packed, bits), q), bits)
            flat = packed.flatten().tolist()
            for o, c, fy, fx in ((0, 0, 0, 0), (4, 15, 2, 1), (2, 7, 1, 0), (3, 8, 0, 1)):
                row = ((o * kh + fy) * kw + fx) * ci  # the kernels' [Co][Kh][Kw][Ci] order
                want = int(q[o, c, fy, fx])
                if bits == 8:
                    self.assertEqual(flat[row + c], want)
                else:
                    byte = flat[(row + c) // 2]
                    self.assertEqual((byte & 15 if c % 2 else byte >> 4) - 8, want)

    def test_quantization_rules(self):
        gen = torch.Generator().manual_seed(4)
        w = torch.randn(6, 64, 3, 3, generator=gen)
        w[1, 32:] = 0.25  # one constant block
        for bits in (4, 8):
            qmax = (1 << (bits - 1)) - 1
            for rule in ("offset", "symmetric"):
                q, s, o = conv.quantize_weights(w, bits, 32, rule)
                self.assertEqual((q.dtype, s.shape, o.shape), (torch.int8, (6, 2), (6, 2)))
                self.assertGreaterEqual(int(q.min()), -qmax - 1)
                self.assertLessEqual(int(q.max()), qmax)
                deq = conv.dequantize(conv.pack_codes(q, bits), s, o, bits)
                step = s.repeat_interleave(32, 1)[..., None, None]
                err = (deq - w).abs()
                self.assertTrue(bool((err <= step * 0.5001 + 1e-6).all()), "%s int%d: error over half a step"
                                % (rule, bits))
                self.assertTrue(torch.equal(deq[1, 32:], w[1, 32:]), "%s int%d: a constant block is exact"
                                % (rule, bits))
                blocks = q.reshape(6, 2, -1)
                if rule == "offset":  # each block's max maps to qmax, its min to −qmax − 1
                    self.assertTrue(bool((blocks.amax(-1)[s != 1] == qmax).all()))
                    self.assertTrue(bool((blocks.amin(-1)[s != 1] == -qmax - 1).all()))
                else:
                    self.assertTrue(bool((o == 0).all()))
                    self.assertTrue(bool((blocks.abs().amax(-1) == qmax).all()))

    def test_refusals(self):
        w = torch.zeros(4, 6, 3, 3)
        with self.assertRaisesRegex(ValueError, "bits=3"):
            conv.pack_weights(w, bits=3)
        with self.assertRaisesRegex(ValueError, "block=4 must divide Ci=6"):
            conv.pack_weights(w, bits=8, block=4)
        with self.assertRaisesRegex(ValueError, "Ci=3 is odd"):
            conv.pack_weights(torch.zeros(4, 3, 3, 3), bits=4, block=3)
        with self.assertRaisesRegex(ValueError, "codes outside -8..7"):
            conv.pack_codes(torch.full((1, 2, 1, 1), 8, dtype=torch.int8), 4)
        with self.assertRaisesRegex(ValueError, "rule 'minmax'"):
            conv.quantize_weights(w, 8, 6, "minmax")


@unittest.skipUnless(torch, "needs torch")
class W8a8Packing(unittest.TestCase):
    def test_dequantize_within_half_a_step(self):
        w = torch.randn(48, 256, generator=torch.Generator().manual_seed(5))
        for rule in ("offset", "symmetric"):
            wq, s, o, sums = w8a8.pack_weights(w, 64, rule)
            deq = w8a8.dequantize(wq, s, o)
            step = s.t().repeat_interleave(64, 1)
            self.assertTrue(bool(((deq - w).abs() <= step * 0.5001 + 1e-6).all()), rule)
            self.assertTrue(torch.equal(sums, wq.int().reshape(48, 4, 64).sum(-1).t()), rule)


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def rounded(v, dtype):
    """v (a float32 value) rounded to nearest even in fp16 or bf16."""
    if dtype is torch.float16:
        return struct.unpack("<e", struct.pack("<e", v))[0]
    b = struct.unpack("<I", struct.pack("<f", v))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


def reference_quantize(w, g, dtype):
    """qjit.wq's rule written out on Python floats, group by group: (q [K][N], s [K/g][N], z [K/g][N]) as lists.
    A float32 operation is the double one rounded to float32 (exact for +, −, ×, ÷ of float32 operands)."""
    n, k = len(w), len(w[0])
    q = [[0] * n for _ in range(k)]
    s = [[0.0] * n for _ in range(k // g)]
    z = [[0] * n for _ in range(k // g)]
    for row in range(n):
        for grp in range(k // g):
            vals = w[row][grp * g:(grp + 1) * g]
            lo, hi = min(min(vals), 0.0), max(max(vals), 0.0)
            scale = rounded(f32(f32(hi - lo) / 15.0), dtype) or 1.0
            zero = min(max(round(f32(-lo / scale)), 0), 15)
            s[grp][row], z[grp][row] = scale, zero
            for i, v in enumerate(vals):
                q[grp * g + i][row] = min(max(round(f32(v / scale)) + zero, 0), 15)
    return q, s, z


def edge_weights(n, k, seed):
    """float32 W [N, K] ~ N(0, 0.05²), with row 0's first group all zero, row 1's all positive, row 2's all
    negative, and row 3's first group on exact ties: range [−0.5, 0.4375] (s = 1/16 exactly, z = 8) holding
    every multiple of 1/32 in it, so that half of w/s are halves."""
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05
    w[0, :128] = 0
    w[1, :128] = w[1, :128].abs() + 0.01
    w[2, :128] = -w[2, :128].abs() - 0.01
    w[3, :128] = torch.arange(128).remainder(31).sub(16).float() / 32
    w[3, 0], w[3, 1] = -0.5, 0.4375
    return w


@unittest.skipUnless(torch, "needs torch")
class WqPacking(unittest.TestCase):
    def test_quantize_equals_the_plain_reference(self):
        w = edge_weights(16, 256, 1)
        for dtype in (torch.float16, torch.bfloat16):
            q, s, z = wq.quantize(w, 128, dtype)
            self.assertEqual((q.dtype, s.dtype, z.dtype, tuple(q.shape), tuple(s.shape)),
                             (torch.uint8, dtype, torch.uint8, (256, 16), (2, 16)))
            rq, rs, rz = reference_quantize(w.tolist(), 128, dtype)
            self.assertEqual(q.tolist(), rq, dtype)
            self.assertEqual(s.float().tolist(), rs, dtype)
            self.assertEqual(z.tolist(), rz, dtype)
            self.assertEqual((q[:128, 0].tolist(), float(s[0, 0])), ([0] * 128, 1.0))  # an all-zero group
            self.assertEqual((int(z[0, 1]), int(z[0, 2]), int(z[0, 3])), (0, 15, 8))  # one-signed, and the ties
            self.assertEqual(float(s[0, 3]), 1 / 16)
            self.assertEqual(sorted(set(q[:128, 3].tolist())), list(range(16)))  # w/s = −8, −7.5, ..., 7
            # each value within half a step of its code's (a scale rounded down may push the top value a rounding
            # of the scale past the last code)
            wd = (q.float() - z.float().repeat_interleave(128, 0)) * s.float().repeat_interleave(128, 0)
            self.assertTrue(bool(((wd.t() - w).abs() <= s.float().t().repeat_interleave(128, 1) * 0.501).all()))

    def test_pack_unpack_and_an_independent_decoder(self):
        from test_safetensors_repack import decode_native4

        q = torch.randint(0, 16, (128, 48), generator=torch.Generator().manual_seed(2))
        words = wq.pack(q)
        self.assertEqual((words.dtype, tuple(words.shape)), (torch.int32, (128 * 48 // 8,)))
        self.assertEqual(decode_native4([v & 0xFFFFFFFF for v in words.tolist()], 128, 48), q.flatten().tolist())
        self.assertTrue(torch.equal(wq.unpack(words, 128, 48), q.to(torch.uint8)))
        self.assertTrue(torch.equal(wq.unpack(words.view(torch.uint32), 128, 48), q.to(torch.uint8)))
        for bad, words_ in ((torch.full((64, 16), 16), "codes outside 0..15"), (torch.zeros(96, 16), "K a multiple of 64"),
                            (torch.zeros(64, 8), "N of 16")):
            with self.assertRaisesRegex(ValueError, words_):
                wq.pack(bad)

    def test_quant_linear_from_float(self):
        lin = torch.nn.Linear(256, 64, bias=True).half()
        m = qjit.nn.QuantLinear.from_float(lin)
        q, s, z = wq.quantize(lin.weight, 128)
        self.assertTrue(torch.equal(m.qweight, wq.pack(q)) and torch.equal(m.scales, s) and torch.equal(m.zeros, z))
        self.assertTrue(torch.equal(m.bias, lin.bias.detach()))
        self.assertEqual((m.in_features, m.out_features, m.group_size, m.zero, m.scales.dtype),
                         (256, 64, 128, "int", torch.float16))
        exact = ((q.float() - z.float().repeat_interleave(128, 0)) * s.float().repeat_interleave(128, 0)).t()
        self.assertTrue(torch.equal(m.dequantized_weight(), exact))
        m32 = qjit.nn.QuantLinear.from_float(torch.nn.Linear(256, 64, bias=True), group_size=64)
        self.assertEqual((m32.scales.dtype, m32.bias.dtype, m32.group_size), (torch.float16, torch.float32, 64))
        fresh = qjit.nn.QuantLinear(256, 64, bias=True)
        fresh.load_state_dict(m.state_dict())
        self.assertTrue(torch.equal(fresh.dequantized_weight(), exact))
        for lin, kwargs, words in ((torch.nn.Linear(96, 64), {}, "in_features=96, out_features=64; the native"),
                                   (torch.nn.Linear(256, 40), {}, "out_features=40"),
                                   (torch.nn.Linear(256, 64), dict(group_size=96), "group_size=96 must divide")):
            with self.assertRaisesRegex(ValueError, words):
                qjit.nn.QuantLinear.from_float(lin, **kwargs)
        with self.assertRaisesRegex(TypeError, "expected a torch.nn.Linear, got Conv2d"):
            qjit.nn.QuantLinear.from_float(torch.nn.Conv2d(4, 4, 1))

    def test_w8a8_linear_e4m3(self):
        lin = torch.nn.Linear(256, 128, bias=True).half()
        m = qjit.nn.W8A8Linear.from_float(lin, format="e4m3")
        wq8, ws, _, _ = w8a8.pack_weights(lin.weight.detach(), format="e4m3")
        self.assertTrue(torch.equal(m.wq.view(torch.uint8), wq8.view(torch.uint8)) and torch.equal(m.w_scale, ws))
        self.assertEqual((m.w_offset, m.w_sum, m.format), (None, None, "e4m3"))
        self.assertIn("format=e4m3", repr(m))
        tiles = (wq8.float().view(1, 128, 2, 128) * ws.t()[:, None, :, None]).view(128, 256)
        self.assertTrue(torch.equal(m.dequantized_weight(), tiles))
        fresh = qjit.nn.W8A8Linear(256, 128, bias=True, format="e4m3")
        fresh.load_state_dict(m.state_dict())
        self.assertTrue(torch.equal(fresh.dequantized_weight(), tiles))
        with self.assertRaisesRegex(ValueError, "format='e4m3' takes block=128 and in_features, out_features "
                                                "multiples of 128; got block=128, in_features=256, out_features=64"):
            qjit.nn.W8A8Linear(256, 64, format="e4m3")


def record(m, x):
    """m(x) with CPU tensors answering as cuda:0: (y, [(device, entry, fields)])."""
    with TorchAsCuda() as pose:
        y = m(x)
    return y, pose.launches


@unittest.skipUnless(torch, "needs torch")
class W8A8LinearModule(unittest.TestCase):
    def test_buffers_state_dict_and_from_float(self):
        lin = torch.nn.Linear(256, 64).half()
        for quant_a in ("offset", "symmetric"):
            for quant_w in ("offset", "symmetric"):
                m = qjit.nn.W8A8Linear.from_float(lin, block=64, quant_a=quant_a, quant_w=quant_w)
                wq, s, o, sums = w8a8.pack_weights(lin.weight.detach(), 64, quant_w)
                self.assertTrue(torch.equal(m.wq, wq) and torch.equal(m.w_scale, s))
                self.assertEqual(m.w_offset is None, quant_w == "symmetric")
                self.assertEqual(m.w_sum is None, quant_a == "symmetric")
                if o is not None:
                    self.assertTrue(torch.equal(m.w_offset, o))
                if m.w_sum is not None:
                    self.assertTrue(torch.equal(m.w_sum, sums))
                self.assertEqual((m.bias.dtype, m.w_scale.shape, m.wq.dtype), (torch.float16, (4, 64), torch.int8))
                fresh = qjit.nn.W8A8Linear(256, 64, bias=True, block=64, quant_a=quant_a, quant_w=quant_w)
                fresh.load_state_dict(m.state_dict())
                for name, t in m.state_dict().items():
                    self.assertTrue(torch.equal(getattr(fresh, name), t), name)
                self.assertIn("block=64, quant_a=%s, quant_w=%s" % (quant_a, quant_w), repr(m))
        self.assertTrue(torch.allclose(m.dequantized_weight(), lin.weight.float(), atol=2e-3))

    def test_refusals(self):
        L = qjit.nn.W8A8Linear
        for kwargs, words in ((dict(block=48), "block=48"), (dict(block=16), "block=16"),
                              (dict(quant_a="fp8"), "quant_a='fp8'"), (dict(act="gelu"), "act='gelu'")):
            with self.assertRaisesRegex(ValueError, words):
                L(256, 64, **kwargs)
        with self.assertRaisesRegex(TypeError, "expected a torch.nn.Linear, got Conv2d"):
            L.from_float(torch.nn.Conv2d(4, 4, 1))
        m = L.from_float(torch.nn.Linear(256, 64).half())
        with self.assertRaisesRegex(ValueError, "w8a8_gemm: x is on cpu"):
            m(torch.randn(2, 256).half())
        with TorchAsCuda() as pose:
            with self.assertRaisesRegex(TypeError, "w8a8_gemm: bias has dtype torch.float16"):
                m(torch.randn(2, 256))  # fp32 x, fp16 bias
            with self.assertRaisesRegex(ValueError, "wq has shape"):
                m(torch.randn(2, 128).half())
        self.assertEqual(pose.launches, [])

    def test_forward_launches_w8a8_gemm(self):
        lin = torch.nn.Linear(256, 64)
        m = qjit.nn.W8A8Linear.from_float(lin, block=128, quant_w="symmetric", act="relu")
        x = torch.randn(2, 3, 256)
        y, launches = record(m, x)
        self.assertEqual((tuple(y.shape), y.dtype), ((2, 3, 64), torch.float32))
        (index, entry, a), = launches
        self.assertEqual((index, entry), (0, "qjit_w8a8_gemm"))
        self.assertEqual((a.k, a.n, a.block, a.m, a.x_dtype, a.quant_a, a.quant_w, a.bias, a.act),
                         (256, 64, 128, 6, b"fp32", b"offset", b"symmetric", 1, b"relu"))
        self.assertEqual((a.x, a.wq, a.w_scale, a.w_offset, a.w_sum, a.bias_ptr, a.y),
                         (x.data_ptr(), m.wq.data_ptr(), m.w_scale.data_ptr(), None, m.w_sum.data_ptr(),
                          m.bias.data_ptr(), y.data_ptr()))

    def test_forward_reads_a_tensor_that_is_no_longer_a_buffer(self):
        """forward reads the buffers from the module's dict (qjit.nn._tensors); a Parameter assigned to one moves
        it to _parameters, and forward still finds it."""
        m = qjit.nn.W8A8Linear.from_float(torch.nn.Linear(256, 64))
        m.bias = torch.nn.Parameter(torch.randn(64), requires_grad=False)
        self.assertNotIn("bias", m._buffers)
        _, launches = record(m, torch.randn(1, 256))
        (_, _, a), = launches
        self.assertEqual((a.bias, a.bias_ptr), (1, m.bias.data_ptr()))


@unittest.skipUnless(torch, "needs torch")
class QConv2dModule(unittest.TestCase):
    def test_buffers_state_dict_and_from_float(self):
        c = torch.nn.Conv2d(64, 32, (3, 1), stride=(2, 1), padding=(1, 0), dilation=(1, 1), bias=True)
        for bits in (4, 8):
            m = qjit.nn.QConv2d.from_float(c, bits=bits, block=16, rule="symmetric", act="relu6")
            qw, s, o = conv.pack_weights(c.weight.detach(), bits, 16, "symmetric")
            self.assertTrue(torch.equal(m.qweight, qw) and torch.equal(m.scales, s) and torch.equal(m.offsets, o))
            self.assertEqual((m.qweight.dtype, tuple(m.qweight.shape)),
                             (torch.uint8, (32, 3, 1, 32)) if bits == 4 else (torch.int8, (32, 3, 1, 64)))
            self.assertEqual((m.stride, m.padding, m.dilation, m.bias.dtype), ((2, 1), (1, 0), (1, 1), torch.float32))
            fresh = qjit.nn.QConv2d(64, 32, (3, 1), (2, 1), (1, 0), bias=True, bits=bits, block=16, act="relu6")
            fresh.load_state_dict(m.state_dict())
            for name, t in m.state_dict().items():
                self.assertTrue(torch.equal(getattr(fresh, name), t), name)
            self.assertIn("bits=%d, block=16, act=relu6" % bits, repr(m))
            self.assertTrue(torch.allclose(m.dequantized_weight(), c.weight, atol=0.2 if bits == 4 else 0.02))

    def test_padding_strings(self):
        m = qjit.nn.QConv2d.from_float(torch.nn.Conv2d(8, 8, 5, padding="same", dilation=2), bits=8, block=8)
        self.assertEqual(m.padding, (4, 4))
        m = qjit.nn.QConv2d.from_float(torch.nn.Conv2d(8, 8, 3, padding="valid"), bits=8, block=8)
        self.assertEqual(m.padding, (0, 0))

    def test_from_float_refuses_what_qconv2d_does_not_compute(self):
        f = qjit.nn.QConv2d.from_float
        for c, block, exc, words in ((torch.nn.Conv2d(8, 8, 3, groups=2), 8, ValueError, "groups=2"),
                                     (torch.nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect"), 8, ValueError,
                                      "padding_mode='reflect'"),
                                     (torch.nn.Conv2d(3, 8, 3), 3, ValueError, "in_channels=3 and block=3 must be even"),
                                     (torch.nn.Conv2d(8, 8, 2, padding="same"), 8, ValueError, "padding='same'"),
                                     (torch.nn.Linear(8, 8), 8, TypeError, "expected a torch.nn.Conv2d, got Linear")):
            with self.assertRaisesRegex(exc, words):
                f(c, block=block)
        with self.assertRaisesRegex(ValueError, "block=24 must divide in_channels=64"):
            f(torch.nn.Conv2d(64, 8, 3), block=24)
        with self.assertRaisesRegex(ValueError, "act='gelu'"):
            f(torch.nn.Conv2d(64, 8, 3), act="gelu")

    def test_forward_nchw_and_channels_last(self):
        m = qjit.nn.QConv2d.from_float(torch.nn.Conv2d(64, 32, 3, stride=2, padding=1, bias=True), bits=4,
                                       block=32)
        x = torch.randn(2, 64, 15, 15).half()
        y, launches = record(m, x)
        self.assertEqual((tuple(y.shape), y.dtype), ((2, 32, 8, 8), torch.float16))
        self.assertTrue(y.is_contiguous())
        (_, entry, a), = launches
        self.assertEqual(entry, "qjit_qconv2d")
        self.assertEqual((a.n, a.ci, a.h, a.w, a.co, a.kh, a.kw, a.stride_h, a.stride_w, a.pad_h, a.pad_w, a.dil_h,
                          a.dil_w, a.layout, a.bits, a.block, a.x_dtype, a.bias, a.act),
                         (2, 64, 15, 15, 32, 3, 3, 2, 2, 1, 1, 1, 1, b"nchw", 4, 32, b"fp16", 1, b"none"))
        self.assertEqual((a.x, a.qweight, a.scales, a.offsets, a.bias_ptr, a.y),
                         (x.data_ptr(), m.qweight.data_ptr(), m.scales.data_ptr(), m.offsets.data_ptr(),
                          m.bias.data_ptr(), y.data_ptr()))
        xl = x.float().contiguous(memory_format=torch.channels_last)
        y, launches = record(m, xl)
        (_, _, a), = launches
        self.assertEqual((a.layout, a.x_dtype, a.x, a.n, a.ci, a.h, a.w), (b"nhwc", b"fp32", xl.data_ptr(), 2, 64, 15,
                                                                          15))
        self.assertEqual(tuple(y.shape), (2, 32, 8, 8))
        self.assertTrue(y.is_contiguous(memory_format=torch.channels_last))
        self.assertEqual(y.data_ptr(), a.y)
        y, launches = record(m, x[0])  # unbatched [C, H, W]
        self.assertEqual((tuple(y.shape), launches[0][2].n), ((32, 8, 8), 1))

    def test_forward_refusals_launch_nothing(self):
        m = qjit.nn.QConv2d.from_float(torch.nn.Conv2d(64, 32, 3), bits=8, block=32)
        with TorchAsCuda() as pose:
            with self.assertRaisesRegex(ValueError, r"QConv2d: x \(shape \[1, 64, 9, 9\], stride .*\) is neither "
                                                    r"contiguous nor channels_last"):
                m(torch.randn(1, 64, 9, 18)[..., ::2])
            with self.assertRaisesRegex(ValueError, "x has 32 channels"):
                m(torch.randn(1, 32, 9, 9))
            with self.assertRaisesRegex(ValueError, r"x has shape \[64, 9\]"):
                m(torch.randn(64, 9))
            with self.assertRaisesRegex(TypeError, "qconv2d: x has dtype torch.bfloat16"):
                m(torch.randn(1, 64, 9, 9).bfloat16())
        self.assertEqual(pose.launches, [])
        with self.assertRaisesRegex(ValueError, "qconv2d: x is on cpu"):
            m(torch.randn(1, 64, 9, 9))


if __name__ == "__main__":
    unittest.main()
