"""The torch side of qjit that needs no GPU: run where torch imports (the GPU
machine, a developer's machine), skipped in CI, which has no torch.

- qjit.nn.QuantLinear.from_awq on CPU tensors: repacked by the `qjit`
  command, its native words decode to the AWQ values written,
- the torch AWQ packer of test_gpu.py equals qjit.awq.pack,
- qjit.safetensors.from_torch / to_torch round trips,
- the real tensor protocol in the checks (dtype, then device),
- the ops' fast paths on real tensors (CPU tensors posing as cuda:0): taken,
  and launching what the checked paths launch,
- QuantGRU's quantization of float input equals the C++ one: `qjit gru run
  --cpu` on the float input and on QuantGRU's codes gives the same states.
- qjit.w8a8.pack_weights(format="e4m3") equals `qjit w8a8 pack --format
  e4m3` (the C++ quantizer the tuner verifies against) bit for bit.
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import qjit  # noqa: E402
from qjit import awq  # noqa: E402
from qjit import safetensors as st  # noqa: E402
from support import CliTest, TorchAsCuda  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


@unittest.skipUnless(torch, "needs torch")
class TorchWithoutGpu(CliTest):
    def test_quant_linear_from_awq(self):
        import test_gpu
        from test_safetensors_repack import decode_native4

        gen = torch.Generator().manual_seed(0)
        L = test_gpu.AwqLayer(256, 64, 64, gen, device="cpu")
        qw, qz, s = L.awq_tensors()
        self.assertEqual(qw.flatten().tolist(), awq.pack(L.q.flatten().tolist(), 256, 64))
        self.assertEqual(qz.flatten().tolist(), awq.pack(L.z.flatten().tolist(), 4, 64))
        lin = qjit.nn.QuantLinear.from_awq(qw, qz, s, device="cpu")
        self.assertEqual((lin.in_features, lin.out_features, lin.group_size, lin.zero), (256, 64, 64, "int"))
        self.assertTrue(torch.equal(lin.zeros, L.z.to(torch.uint8)))
        self.assertTrue(torch.equal(lin.scales, s))
        self.assertEqual(lin.qweight.dtype, torch.int32)
        words = [w & 0xFFFFFFFF for w in lin.qweight.tolist()]
        self.assertEqual(decode_native4(words, 256, 64), L.q.flatten().tolist())
        x = torch.randn(2, 256, dtype=torch.float16)
        with self.assertRaisesRegex(ValueError, "wq_gemm: x is on cpu; expected a CUDA tensor"):
            lin(x)
        with self.assertRaisesRegex(TypeError, r"wq_gemm: x has dtype torch.float64; expected fp16 \(torch.float16\), "
                                               r"bf16 \(torch.bfloat16\) or fp32 \(torch.float32\)"):
            lin(x.double())

    def test_safetensors_from_and_to_torch(self):
        for dt in (torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.uint8, torch.int8):
            t = (torch.randn(3, 5) * 50).to(dt)
            back = st.to_torch(st.from_torch(t))
            self.assertEqual(back.dtype, dt)
            self.assertTrue(torch.equal(back, t), dt)

    def test_quant_gru_quantizes_as_the_cli(self):
        import test_gpu

        gru = torch.nn.GRU(16, 16)
        p = self.file
        st.write(p("g.safetensors"), {k: st.from_torch(v.detach().float()) for k, v in gru.state_dict().items()})
        x = torch.sin(torch.arange(20.0)[:, None, None] * 0.3 + torch.rand(1, 2, 16) * 6) * 0.5
        st.write(p("x.safetensors"), {"x": st.from_torch(x)})
        qjit._cli.run(["gru", "calibrate", "--weights", p("g.safetensors"), "--input", p("x.safetensors"),
                       "--bits", "8", "-o", p("params.json"), "--weights-out", p("q.safetensors"), "-q"])
        qg = qjit.nn.QuantGRU.from_files(p("params.json"), p("q.safetensors"), device="cpu")
        self.assertEqual((qg.W.dtype, tuple(qg.W.shape), qg.bw.dtype), (torch.int8, (48, 16), torch.int32))
        # x slightly outside the calibrated range too: saturation must agree
        x = x * 1.5
        st.write(p("x.safetensors"), {"x": st.from_torch(x)})
        st.write(p("xc.safetensors"), {"x": st.from_torch(qg._quantize(x, qg._x))})
        for name in ("x", "xc"):
            qjit._cli.run(["gru", "run", "--cpu", "--params", p("params.json"), "--weights", p("q.safetensors"),
                           "--input", p(name + ".safetensors"), "-o", p(name + ".npy")])
        self.assertTrue(torch.equal(test_gpu.load_npy_int32(p("x.npy")), test_gpu.load_npy_int32(p("xc.npy"))))
        with self.assertRaisesRegex(ValueError, "gru_quant: x is on cpu"):
            qg(x)

    def test_w8a8_e4m3_packer_equals_the_cli(self):
        from qjit import w8a8

        gen = torch.Generator().manual_seed(5)
        n, k = 256, 384
        # Tiles of spread magnitudes, one all zero (scale 1), tiny values (subnormal and zero codes), and
        # values at midpoints between e4m3 codes (448 in the tile: scale 1, so the midpoints are ties).
        w = torch.randn(n, k, generator=gen) * torch.tensor([1e-3, 1.0, 30.0])[None, :].repeat_interleave(128, 1)
        w[:128, 128:256] = 0
        w[128:, :128] *= 2.0 ** -6  # with the 1.0 below: x/scale ~ 2^-8, subnormal codes
        w[128:, :128][0, 0] = 1.0
        mids = torch.tensor([0.5 * (a + b) for a, b in ((1.0, 1.125), (2.25, 2.5), (-6.5, -7.0), (0.015625, 0.017578125))])
        w[:128, 256:] = mids.repeat(128 * 128 // 4).view(128, 128)
        w[0, 256] = 448.0
        p = self.file
        st.write(p("w.safetensors"), {"w": st.from_torch(w)})
        qjit._cli.run(["w8a8", "pack", "--weights", p("w.safetensors"), "--format", "e4m3", "-o", p("q.safetensors")])
        cli = st.read(p("q.safetensors"))
        wq, ws, wo, wsum = w8a8.pack_weights(w, format="e4m3")
        self.assertEqual((wo, wsum), (None, None))
        self.assertTrue(torch.equal(wq.view(torch.uint8), st.to_torch(cli["wq"])))
        self.assertTrue(torch.equal(ws, st.to_torch(cli["w_scale"])))
        self.assertEqual(ws[1, 0].item(), 1.0)  # the zero tile
        with self.assertRaisesRegex(ValueError, "format='e4m3' takes block=128"):
            w8a8.pack_weights(w, 64, format="e4m3")


@unittest.skipUnless(torch, "needs torch")
class FastPathOnTorchTensors(unittest.TestCase):
    """ops' fast paths read torch's own attributes (torch.Size, dtype objects, new_empty): CPU tensors answer
    as cuda:0 here (is_cuda, get_device() and device patched on torch.Tensor for the test), launches recorded."""

    def setUp(self):
        from qjit import ops

        self.pose = TorchAsCuda().__enter__()
        self.launches, self.checked = self.pose.launches, []
        self.saved = {"_fused_ffn_checked": ops._fused_ffn_checked, "_wq_gemm_checked": ops._wq_gemm_checked}
        for name in ("_fused_ffn_checked", "_wq_gemm_checked"):
            setattr(ops, name, lambda *a, _f=self.saved[name], _n=name, **k: (self.checked.append(_n), _f(*a, **k))[1])

    def tearDown(self):
        from qjit import ops

        self.pose.__exit__()
        for name, f in self.saved.items():
            setattr(ops, name, f)

    def fast_and_checked(self, op, *args, **kwargs):
        """op's launch from its fast path (after a first call), then from its checked path."""
        getattr(qjit, op)(*args, **kwargs)
        self.launches.clear()
        self.checked.clear()
        y = getattr(qjit, op)(*args, **kwargs)
        self.assertEqual(self.checked, [], "%s took the checked path" % op)
        self.saved["_%s_checked" % op](*args, **kwargs)
        (fast, ref) = self.launches
        self.launches.clear()
        return y, fast, ref

    def test_fused_ffn_and_wq_gemm(self):
        x, w = torch.empty(2, 256, dtype=torch.float16), torch.empty(512, 256, dtype=torch.float16)
        out = torch.empty(2, 512, dtype=torch.float16)
        y, fast, ref = self.fast_and_checked("fused_ffn", x, w, w, out=out)
        self.assertIs(y, out)
        self.assertEqual(fast, ref)
        y, fast, ref = self.fast_and_checked("fused_ffn", torch.empty(3, 1, 256), w, w, act="silu_lut")  # mixed
        self.assertEqual((tuple(y.shape), y.dtype), ((3, 1, 512), torch.float32))
        (_, entry, a), (_, _, b) = fast, ref
        self.assertEqual((entry, a.d, a.h, a.m, a.dtype, a.act), ("qjit_dense_ffn", 256, 512, 3, b"mixed", b"silu_lut"))
        self.assertEqual(a.values()[:-1], b.values()[:-1])  # all but the new output's pointer
        self.assertEqual(a.y, y.data_ptr())
        qw, sc, z = torch.empty(256 * 64 // 8, dtype=torch.int32), torch.empty(2, 64, dtype=torch.bfloat16), \
            torch.empty(2, 64, dtype=torch.uint8)
        y, fast, ref = self.fast_and_checked("wq_gemm", torch.empty(4, 256, dtype=torch.bfloat16), qw, sc, z,
                                             bias=torch.empty(64, dtype=torch.bfloat16))
        self.assertEqual((tuple(y.shape), y.dtype), ((4, 64), torch.bfloat16))
        (_, entry, a), (_, _, b) = fast, ref
        self.assertEqual((entry, a.k, a.n, a.m, a.zero, a.scales_dtype, a.x_dtype, a.bias), ("qjit_wq_gemm", 256, 64, 4,
                                                                                           b"int", b"bf16", b"bf16", 1))
        self.assertEqual(a.values()[:-2], b.values()[:-2])  # all but y (a new output each) and m
        self.assertEqual(a.m, b.m)
        self.assertEqual(a.y, y.data_ptr())


if __name__ == "__main__":
    unittest.main()
