"""qjit's Python ops on real CUDA tensors against PyTorch (the GPU machine:
tests/gpu_python.sh). Skipped without torch or a CUDA device.

- each op against a float reference of the same weights in torch (awq_dequant
  bit-exact; float ops within a stated tolerance),
- wrong dtype / device / stride on real tensors: TypeError or ValueError
  naming the tensor, and the output left as it was (nothing launched),
- CUDA graph capture after a warm call, replayed on new inputs,
- qjit.nn modules through torch.compile (fullgraph=True, and
  mode="reduce-overhead": CUDA graphs) against eager, and opcheck of
  torch.ops.qjit on CUDA tensors,
- the end-to-end Llama-style MLP: an AWQ-format safetensors file written
  here, repacked, tuned and run through qjit.nn against a float reference,
- the host cost of a cache hit from Python next to qjit_launch_probe's from
  C++, in one run (written to $QJIT_PY_RESULTS as JSON lines when set).

Environment: QJIT_TUNE_BUDGET (the e2e test's `qjit tune --budget` per spec
and M, default "160" candidates: LlamaMlpEndToEnd says why),
QJIT_LAUNCH_PROBE (path of qjit_launch_probe; default .dist/bin).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import qjit  # noqa: E402
from qjit import awq  # noqa: E402
from qjit import safetensors as st  # noqa: E402

try:
    import torch
    import torch.nn.functional as F

    CUDA = torch.cuda.is_available()
except ImportError:
    torch = None
    CUDA = False

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def record(entry):
    """Prints a result line and appends it to $QJIT_PY_RESULTS."""
    line = json.dumps(entry)
    print(line, flush=True)
    path = os.environ.get("QJIT_PY_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def pack_awq(q):
    """q [R, N] (0..15) -> int32 [R, N/8] in AWQ's order (qjit.awq.AWQ_ORDER), vectorised."""
    r, n = q.shape
    order = torch.tensor(awq.AWQ_ORDER, device=q.device)
    v = q.to(torch.int64).view(r, n // 8, 8)[:, :, order]
    w = (v << (torch.arange(8, device=q.device) * 4)).sum(-1)
    return torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)


class AwqLayer:
    """Random AWQ weights of a Linear(K -> N), group g: q [K, N], z [K/g, N], s [K/g, N] fp16 and
    W [K, N] = (q - z)·s in float32 (exact)."""

    def __init__(self, k, n, g, gen, device="cuda"):
        self.k, self.n, self.g = k, n, g
        self.q = torch.randint(0, 16, (k, n), generator=gen).to(device)
        self.z = torch.randint(0, 16, (k // g, n), generator=gen).to(device)
        # |w| ~ 2/√k, so that x·W stays O(1)
        self.s = ((torch.rand(k // g, n, generator=gen) + 0.5) * (0.5 / k ** 0.5)).half().to(device)
        zk = self.z.repeat_interleave(g, 0)
        self.w = (self.q - zk).float() * self.s.float().repeat_interleave(g, 0)

    def awq_tensors(self):
        return pack_awq(self.q), pack_awq(self.z), self.s


def close(test, y, ref, rel, what):
    """max |y - ref| <= rel · max |ref| (float64)."""
    err = (y.double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    test.assertLessEqual(err, rel * scale, "%s: max error %.3g, max |ref| %.3g" % (what, err, scale))
    return err / scale


@unittest.skipUnless(CUDA, "needs torch with a CUDA device")
class GpuOps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gen = torch.Generator().manual_seed(1234)
        cls.layer = AwqLayer(512, 256, 128, cls.gen)
        cls.lin = qjit.nn.QuantLinear.from_awq(*cls.layer.awq_tensors(), device="cuda")

    def randn(self, *shape, dtype=None):
        return torch.randn(*shape, generator=self.gen).to("cuda", dtype or torch.float16)

    def test_awq_packing_matches_the_pure_python_packer(self):
        q = self.layer.q[:4]
        self.assertEqual(pack_awq(q).flatten().tolist(), awq.pack(q.flatten().tolist(), 4, q.shape[1]))

    def test_awq_dequant_bit_exact(self):
        L = self.layer
        qw, qz, s = L.awq_tensors()
        w = qjit.awq_dequant(qw, qz, s)
        self.assertEqual(w.dtype, torch.float16)
        self.assertTrue(torch.equal(w, L.w.half()), "awq_dequant differs from (q - z)·s rounded once")
        wb = qjit.awq_dequant(qw, qz, s, out_dtype="bf16")
        self.assertTrue(torch.equal(wb, L.w.bfloat16()))

    def test_wq_gemm_against_torch(self):
        L, lin = self.layer, self.lin
        for m in (1, 5, 33, 300):
            x = self.randn(m, L.k)
            close(self, lin(x), x.float() @ L.w, 1e-2, "wq_gemm m=%d" % m)
        x = self.randn(2, 3, L.k)  # leading dims
        self.assertEqual(tuple(lin(x).shape), (2, 3, L.n))
        close(self, lin(x), x.float() @ L.w, 1e-2, "wq_gemm [2, 3, K]")
        # bias, relu and a residual added in place
        bias, res = self.randn(L.n), self.randn(4, L.n)
        x = self.randn(4, L.k)
        ref = torch.relu(x.float() @ L.w + bias.float()) + res.float()
        y = qjit.wq_gemm(x, lin.qweight, lin.scales, lin.zeros, bias=bias, act="relu", residual=res, out=res)
        self.assertEqual(y.data_ptr(), res.data_ptr())
        close(self, y, ref, 1e-2, "wq_gemm bias+relu+residual")

    def test_w8a8_gemm_against_torch(self):
        from qjit import w8a8

        n, k, block = 384, 1024, 128
        w = self.randn(n, k).float() / k ** 0.5
        for rule in ("offset", "symmetric"):
            wq, ws, wo, wsum = w8a8.pack_weights(w, block, rule)
            # W as the kernel sees it: q·s + o per block, in float32.
            wd = (wq.float().view(n, k // block, block) * ws.t()[..., None]
                  + (wo.t()[..., None] if wo is not None else 0)).view(n, k)
            for m in (1, 7, 300):
                x = self.randn(m, k)
                y = qjit.w8a8_gemm(x, wq, ws, wo, wsum, block=block, quant_a=rule)
                self.assertEqual((tuple(y.shape), y.dtype), ((m, n), x.dtype))
                # x's quantization error (half a step of (max - min)/255 per element) dominates: 3% of the scale.
                close(self, y, x.float() @ wd.t(), 3e-2, "w8a8_gemm %s m=%d" % (rule, m))
        bias = self.randn(n)
        x = self.randn(5, k)
        wq, ws, wo, wsum = w8a8.pack_weights(w, block)
        y = qjit.w8a8_gemm(x, wq, ws, wo, wsum, block=block, bias=bias, act="relu6")
        wd = (wq.float().view(n, k // block, block) * ws.t()[..., None] + wo.t()[..., None]).view(n, k)
        close(self, y, (x.float() @ wd.t() + bias.float()).clamp(0, 6), 3e-2, "w8a8_gemm bias+relu6")

    def test_w8a8_gemm_e4m3_against_torch(self):
        """format="e4m3" (sm_89+): codes from pack_weights(format="e4m3"), y against x @ W dequantized in float."""
        from qjit import w8a8

        if torch.cuda.get_device_capability() < (8, 9):
            self.skipTest("format=e4m3 needs compute capability 8.9+")
        n, k = 384, 1024
        w = self.randn(n, k).float() / k ** 0.5
        wq, ws, wo, wsum = w8a8.pack_weights(w, format="e4m3")
        self.assertEqual((wq.dtype, tuple(wq.shape), tuple(ws.shape), wo, wsum),
                         (torch.float8_e4m3fn, (n, k), (k // 128, n // 128), None, None))
        # W as the kernel sees it: code · tile scale, in float32.
        wd = (wq.float().view(n // 128, 128, k // 128, 128) * ws.t()[:, None, :, None]).view(n, k)
        bias = self.randn(n)
        for m in (1, 7, 300):
            x = self.randn(m, k)
            # x as the kernel quantizes it (per row and 128-block, scale amax/448), dequantized in float32:
            # what remains is the tensor cores' accumulation and y's rounding.
            b = x.float().view(m, k // 128, 128)
            amax = b.abs().amax(-1, keepdim=True)
            sx = torch.where(amax == 0, torch.ones_like(amax), amax / torch.full_like(amax, 448.0))
            xd = ((b / sx).to(torch.float8_e4m3fn).float() * sx).view(m, k)
            y = qjit.w8a8_gemm(x, wq, ws)
            self.assertEqual((tuple(y.shape), y.dtype), ((m, n), x.dtype))
            close(self, y, xd @ wd.t(), 1e-2, "w8a8_gemm e4m3 m=%d" % m)
            # Against the unquantized x: e4m3's 3 mantissa bits (≤ 1/16 of each element) dominate.
            close(self, y, x.float() @ wd.t(), 8e-2, "w8a8_gemm e4m3 m=%d vs float x" % m)
            # The same codes as uint8 bytes, with format named, and bias + relu6.
            y = qjit.w8a8_gemm(x, wq.view(torch.uint8), ws, format="e4m3", bias=bias, act="relu6")
            close(self, y, (xd @ wd.t() + bias.float()).clamp(0, 6), 1e-2, "w8a8_gemm e4m3 bias+relu6")

    def test_qconv2d_against_torch(self):
        gen = torch.Generator().manual_seed(7)
        for layout, bits, block in (("nchw", 4, 32), ("nhwc", 8, 64)):
            nb, ci, hw, co = 2, 64, 14, 32
            q = torch.randint(-8 if bits == 4 else -128, 8 if bits == 4 else 128, (co, ci, 3, 3), generator=gen)
            s = torch.rand(co, ci // block, generator=gen) * 0.02 + 0.01
            o = (torch.rand(co, ci // block, generator=gen) - 0.5) * 0.01
            wd = (q.float() * s.repeat_interleave(block, 1)[..., None, None]
                  + o.repeat_interleave(block, 1)[..., None, None])
            ohwi = q.permute(0, 2, 3, 1).contiguous()  # the seed's [Co, Kh, Kw, Ci]
            if bits == 4:  # channel 2j in the high nibble, each code + 8
                u = (ohwi + 8).to(torch.uint8)
                packed = (u[..., 0::2] << 4) | u[..., 1::2]
            else:
                packed = ohwi.to(torch.int8)
            x = self.randn(nb, ci, hw, hw)
            ref = F.conv2d(x.float(), wd.cuda(), padding=1, stride=1)
            xin = x if layout == "nchw" else x.permute(0, 2, 3, 1).contiguous()
            y = qjit.qconv2d(xin, packed.cuda(), s.cuda(), o.cuda(), bits=bits, block=block, padding=1,
                             layout=layout)
            if layout == "nhwc":
                y = y.permute(0, 3, 1, 2)
            close(self, y, ref, 1e-2, "qconv2d %s int%d" % (layout, bits))

    def test_fused_ffn_dense_and_quantized(self):
        d, h = 512, 1024
        w1, w3 = self.randn(h, d) / d ** 0.5, self.randn(h, d) / d ** 0.5
        for m in (1, 8):
            x = self.randn(m, d)
            ref = F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T)
            close(self, qjit.fused_ffn(x, w1, w3), ref, 1e-2, "fused_ffn dense m=%d" % m)
        gen = torch.Generator().manual_seed(5)
        g1, g3 = AwqLayer(d, h, 128, gen), AwqLayer(d, h, 128, gen)
        ffn = qjit.nn.FusedFFN.from_quant(qjit.nn.QuantLinear.from_awq(*g1.awq_tensors()),
                                          qjit.nn.QuantLinear.from_awq(*g3.awq_tensors()))
        for m in (1, 3, 8, 20):  # 20 rows: two wq_gemm calls
            x = self.randn(m, d)
            ref = F.silu(x.float() @ g1.w) * (x.float() @ g3.w)
            close(self, ffn(x), ref, 1e-2, "FusedFFN quantized m=%d" % m)

    def test_fp_lut_against_torch(self):
        x = torch.linspace(-8, 8, 100003, device="cuda").half()
        for fn, ref in (("silu", F.silu), ("gelu", F.gelu), ("sigmoid", torch.sigmoid)):
            y = qjit.fp_lut(x, fn)
            err = (y.float() - ref(x.float())).abs().max().item()
            record({"test": "fp_lut", "fn": fn, "max_abs_err": err})
            self.assertLess(err, 2e-2, fn)
        y = qjit.fp_lut(x.float(), "silu", out_dtype="bf16")
        self.assertEqual(y.dtype, torch.bfloat16)

    def test_quant_gru_bit_exact_with_the_cpu_reference(self):
        t, n, c, h = 24, 2, 32, 32
        gru = torch.nn.GRU(c, h).double()
        steps = torch.arange(t, dtype=torch.float64)[:, None, None]
        x = (0.5 * torch.sin(0.2 * steps + torch.rand(1, n, c, generator=self.gen, dtype=torch.float64) * 6)).float()
        with tempfile.TemporaryDirectory() as tmp:
            p = lambda name: os.path.join(tmp, name)  # noqa: E731
            st.write(p("gru.safetensors"), {k: st.from_torch(v.float()) for k, v in gru.state_dict().items()})
            st.write(p("x.safetensors"), {"x": st.from_torch(x)})
            qjit._cli.run(["gru", "calibrate", "--weights", p("gru.safetensors"), "--input", p("x.safetensors"),
                           "--bits", "8", "-o", p("params.json"), "--weights-out", p("q.safetensors"), "-q"])
            qgru = qjit.nn.QuantGRU.from_files(p("params.json"), p("q.safetensors"))
            y, h_n = qgru(x.cuda())
            qjit._cli.run(["gru", "run", "--cpu", "--params", p("params.json"), "--weights", p("q.safetensors"),
                           "--input", p("x.safetensors"), "-o", p("y_cpu.npy")])
            cpu = load_npy_int32(p("y_cpu.npy"))
        codes, _ = qgru.forward_codes(qgru._quantize(x.cuda(), qgru._x),
                                      qgru._quantize(torch.zeros(n, h, device="cuda"), qgru._h))
        self.assertTrue(torch.equal(codes.cpu(), cpu.reshape(t, n, h)), "GPU codes differ from `qjit gru run --cpu`")
        with torch.no_grad():
            ref, _ = gru(x.double())
        mse = ((y.double().cpu() - ref) ** 2).mean().item()
        record({"test": "quant_gru", "mse_vs_torch_gru": mse})
        self.assertLess(mse, 1e-3)
        self.assertTrue(torch.equal(h_n[0], y[-1]))

    def test_wrong_arguments_raise_and_launch_nothing(self):
        L, lin = self.layer, self.lin
        out = torch.full((2, L.n), 7.0, device="cuda", dtype=torch.float16)
        x = self.randn(2, L.k)
        cases = [
            (TypeError, "x has dtype torch.float64", dict(x=x.double())),
            (ValueError, "x is on cpu", dict(x=x.cpu())),
            (ValueError, "x is not contiguous", dict(x=self.randn(L.k, 2).T)),
            (ValueError, "scales has shape", dict(scales=lin.scales[:1])),
            (TypeError, "zeros has dtype torch.int32", dict(zeros=lin.zeros.int())),
        ]
        for exc, words, over in cases:
            a = dict(x=x, qweight=lin.qweight, scales=lin.scales, zeros=lin.zeros)
            a.update(over)
            with self.assertRaises(exc) as cm:
                qjit.wq_gemm(a.pop("x"), **a, out=out)
            self.assertIn(words, str(cm.exception))
        torch.cuda.synchronize()
        self.assertTrue(bool((out == 7.0).all()), "a refused call wrote its output")
        if torch.cuda.device_count() > 1:
            with self.assertRaisesRegex(ValueError, "is on cuda:1 but x is on cuda:0"):
                qjit.wq_gemm(x, lin.qweight, lin.scales.to("cuda:1"), lin.zeros)

    def test_cuda_graph_capture_after_a_warm_call(self):
        L, lin = self.layer, self.lin
        d, h = 512, 1024
        w1, w3 = self.randn(h, d) / d ** 0.5, self.randn(h, d) / d ** 0.5
        x = self.randn(1, L.k)
        xf = self.randn(1, d)
        lin(x), qjit.fused_ffn(xf, w1, w3)  # warm: kernels loaded before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = lin(x)
            yf = qjit.fused_ffn(xf, w1, w3)
        for _ in range(3):
            x.copy_(self.randn(1, L.k))
            xf.copy_(self.randn(1, d))
            graph.replay()
            torch.cuda.synchronize()
            # A split-K kernel may sum in another order from one launch to the next: close, not equal.
            # Stale outputs (a replay that launched nothing) would be off by O(1).
            close(self, y, lin(x), 2e-3, "replayed wq_gemm vs an eager call")
            close(self, yf, qjit.fused_ffn(xf, w1, w3), 2e-3, "replayed fused_ffn vs an eager call")

    def test_preload_launches_nothing_then_a_graph_captures_the_op(self):
        """qjit.preload() on the capture stream readies kernels and that stream's workspace (w8a8_gemm has one)."""
        from qjit import w8a8

        n, k = 256, 512
        wq, ws, wo, wsum = w8a8.pack_weights(self.randn(n, k).float() / k ** 0.5, 128)
        x = self.randn(4, k)
        y = torch.full((4, n), 7.0, device="cuda", dtype=torch.float16)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            with qjit.preload():
                qjit.w8a8_gemm(x, wq, ws, wo, wsum, out=y)
        torch.cuda.synchronize()
        self.assertTrue(bool((y == 7.0).all()), "a preloaded call launched")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            qjit.w8a8_gemm(x, wq, ws, wo, wsum, out=y)
        x.copy_(self.randn(4, k))
        graph.replay()
        torch.cuda.synchronize()
        close(self, y, qjit.w8a8_gemm(x, wq, ws, wo, wsum), 1e-3, "replayed w8a8_gemm vs an eager call")



@unittest.skipUnless(CUDA, "needs torch with a CUDA device")
class GpuModules(unittest.TestCase):
    """qjit.nn.W8A8Linear and QConv2d made from float torch modules, against torch on the dequantized weights
    (what the kernels multiply): the tolerances of the ops' own tests above, as fractions of max |reference|:
    w8a8 3e-2 (x's online quantization dominates), qconv2d 1e-2 with fp16 x (the tensor-core path rounds
    the weights to fp16) and 5e-4 with fp32 x (fp32 products and sums over Kh·Kw·Ci ≤ 576 terms)."""

    def setUp(self):
        self.gen = torch.Generator().manual_seed(11)

    def randn(self, *shape, dtype=None):
        return torch.randn(*shape, generator=self.gen).to("cuda", dtype or torch.float16)

    def test_w8a8_linear_from_float(self):
        lin = torch.nn.Linear(512, 192).to("cuda")
        for dtype in (torch.float16, torch.bfloat16):
            for quant_a in ("offset", "symmetric"):
                for quant_w in ("offset", "symmetric"):
                    m = qjit.nn.W8A8Linear.from_float(lin, block=128, quant_a=quant_a, quant_w=quant_w, act="relu",
                                                      dtype=dtype)
                    wd = m.dequantized_weight()
                    for rows in (1, 7, 64):
                        x = self.randn(rows, 512, dtype=dtype)
                        y = m(x)
                        self.assertEqual((tuple(y.shape), y.dtype, y.device), ((rows, 192), dtype, x.device))
                        ref = torch.relu(x.float() @ wd.T + m.bias.float())
                        close(self, y, ref, 3e-2, "W8A8Linear %s a=%s w=%s rows=%d" % (dtype, quant_a, quant_w, rows))
        x = self.randn(2, 3, 512, dtype=torch.float32)  # leading dims, fp32 x with a float32 module
        m = qjit.nn.W8A8Linear.from_float(lin)
        close(self, m(x), x @ m.dequantized_weight().T + lin.bias.detach(), 3e-2, "W8A8Linear fp32 [2, 3, K]")

    def test_qconv2d_from_float(self):
        cases = [  # (conv, bits, block, rule, x dtype, memory format, act)
            (torch.nn.Conv2d(64, 48, 3, padding=1), 4, 32, "offset", torch.float16, "nchw", "none"),
            (torch.nn.Conv2d(64, 48, 3, padding=1, bias=False), 8, 64, "symmetric", torch.float16, "channels_last",
             "relu"),
            (torch.nn.Conv2d(32, 16, (3, 5), stride=2, padding=(2, 1), dilation=(2, 1)), 8, 16, "offset",
             torch.float32, "nchw", "relu6"),
            (torch.nn.Conv2d(32, 40, 1), 4, 8, "symmetric", torch.float32, "channels_last", "none"),
        ]
        for c, bits, block, rule, dtype, fmt, act in cases:
            c = c.to("cuda")
            m = qjit.nn.QConv2d.from_float(c, bits=bits, block=block, rule=rule, act=act)
            x = self.randn(2, c.in_channels, 13, 11, dtype=dtype)
            if fmt == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            y = m(x)
            ref = F.conv2d(x.float(), m.dequantized_weight(), m.bias, c.stride, c.padding, c.dilation)
            ref = {"none": ref, "relu": torch.relu(ref), "relu6": ref.clamp(0, 6)}[act]
            what = "QConv2d int%d %s %s %s" % (bits, dtype, fmt, act)
            self.assertEqual((tuple(y.shape), y.dtype), (tuple(ref.shape), dtype), what)
            if fmt == "channels_last":
                self.assertTrue(y.is_contiguous(memory_format=torch.channels_last), what)
            close(self, y, ref, 1e-2 if dtype == torch.float16 else 5e-4, what)
            y1 = m(x[1])  # unbatched
            close(self, y1, ref[1], 1e-2 if dtype == torch.float16 else 5e-4, what + " unbatched")

    def test_module_refusals_on_real_tensors(self):
        m = qjit.nn.QConv2d.from_float(torch.nn.Conv2d(64, 32, 3).to("cuda"))
        with self.assertRaisesRegex(ValueError, "neither contiguous nor channels_last"):
            m(self.randn(1, 64, 9, 18)[..., ::2])
        with self.assertRaisesRegex(ValueError, "qconv2d: x is on cpu"):
            m(torch.randn(1, 64, 9, 9).half())
        lin = qjit.nn.W8A8Linear.from_float(torch.nn.Linear(256, 64).to("cuda").half())
        with self.assertRaisesRegex(ValueError, "w8a8_gemm: x is not contiguous"):
            lin(self.randn(256, 2).T)


def _custom_ops_registered():
    from qjit import custom_ops

    return custom_ops.unavailable is None


def random_quant_linear(k, n, gen, bias=False):
    """A QuantLinear(k -> n), 4-bit g=128 zero="int", of random codes, zeros and small scales (|w| ~ 1/√k)."""
    lin = qjit.nn.QuantLinear(k, n, bias, device="cuda")
    lin.qweight.copy_(torch.randint(-2 ** 31, 2 ** 31 - 1, lin.qweight.shape, generator=gen, dtype=torch.int32))
    lin.zeros.copy_(torch.randint(0, 16, lin.zeros.shape, generator=gen).to(torch.uint8))
    lin.scales.copy_((torch.rand(lin.scales.shape, generator=gen) + 0.5) * 0.25 / k ** 0.5)
    if bias:
        lin.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    return lin


@unittest.skipUnless(CUDA and _custom_ops_registered(), "needs torch >= 2.4 with a CUDA device")
class GpuCompile(unittest.TestCase):
    """qjit.nn modules under torch.compile(fullgraph=True) (inductor, calling torch.ops.qjit) and
    mode="reduce-overhead" (CUDA graphs: the first call of a shape runs eagerly on the graph's stream, which
    loads its kernels and that stream's workspace, then the graph is captured and replayed) give the eager
    module's outputs, on new inputs at every call; and torch.library.opcheck of each op on CUDA tensors.

    Within 2e-3 of max |eager|, not equal: a split-K kernel may sum in another order from one launch to the
    next, and inductor computes the torch ops around qjit's in its own kernels (FusedFFN's unfused path:
    silu and the product). A replay that launched nothing, or a graph fed stale inputs, is off by O(1)."""

    def setUp(self):
        torch._dynamo.reset()
        self.gen = torch.Generator().manual_seed(21)

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.gen).to("cuda", torch.float16)

    def same_as_eager(self, what, module, make_inputs, calls):
        """Each mode's compiled module against the eager one, a fresh input at each call (calls: the leading sizes
        of x in order; a repeated one replays its CUDA graph, a new one compiles or records anew)."""
        for mode in (None, "reduce-overhead"):
            torch._dynamo.reset()
            compiled = torch.compile(module, fullgraph=True, mode=mode)
            for i, rows in enumerate(calls):
                args = make_inputs(rows)
                with torch.no_grad():
                    want = module(*args)
                    got = compiled(*args).clone()  # a CUDA graph's output is overwritten by its next replay
                torch.cuda.synchronize()
                self.assertEqual((got.shape, got.dtype), (want.shape, want.dtype), what)
                close(self, got, want, 2e-3, "%s, mode=%s, call %d (%s rows)" % (what, mode, i, rows))

    def test_quant_linear(self):
        lin = random_quant_linear(1024, 512, self.gen, bias=True)
        self.same_as_eager("QuantLinear", lin, lambda m: (self.randn(m, 1024),), (4, 4, 4, 33, 33, 1))

        class Block(torch.nn.Module):  # torch ops around the custom op, for inductor to fuse
            def __init__(self):
                super().__init__()
                self.lin = lin

            def forward(self, x, r):
                return torch.relu(self.lin(torch.nn.functional.layer_norm(x, x.shape[-1:]), residual=r * 0.5)) * 2

        self.same_as_eager("QuantLinear in a block, with a residual", Block(),
                           lambda m: (self.randn(m, 1024), self.randn(m, 512)), (2, 2, 2))

    def test_fused_ffn(self):
        gate, up = random_quant_linear(512, 1024, self.gen), random_quant_linear(512, 1024, self.gen)
        ffn = qjit.nn.FusedFFN.from_quant(gate, up)
        # 1..8 rows: one fused_ffn; 20: two wq_gemm and torch's silu.
        self.same_as_eager("FusedFFN quantized", ffn, lambda m: (self.randn(m, 512),), (1, 1, 1, 8, 8, 20, 20))
        w1, w3 = self.randn(1024, 512) / 512 ** 0.5, self.randn(1024, 512) / 512 ** 0.5
        dense = qjit.nn.FusedFFN.from_dense(w1, w3)
        self.same_as_eager("FusedFFN dense", dense, lambda m: (self.randn(m, 512),), (3, 3, 3))

    def test_w8a8_linear(self):
        lin = qjit.nn.W8A8Linear.from_float(torch.nn.Linear(512, 384).to("cuda").half(), act="relu")
        self.same_as_eager("W8A8Linear", lin, lambda m: (self.randn(m, 512),), (5, 5, 5, 64, 64))

    def test_qconv2d(self):
        conv = qjit.nn.QConv2d.from_float(torch.nn.Conv2d(64, 32, 3, padding=1).to("cuda"), bits=4, block=32)
        self.same_as_eager("QConv2d NCHW", conv, lambda n: (self.randn(n, 64, 14, 14),), (2, 2, 2))
        self.same_as_eager("QConv2d channels_last", conv, lambda n: (
            self.randn(n, 64, 14, 14).contiguous(memory_format=torch.channels_last),), (2, 2, 2))

    def test_opcheck_on_cuda(self):
        """The schema, the fake implementation against the real one and AOT dispatch, on real tensors, for each op
        but gru_quant (its params come from `qjit gru calibrate`; test_custom_ops.py checks it on meta tensors).
        opcheck compares runs of an op at torch's default tolerances: x and the GEMMs' weights hold small
        integers (scales powers of two), so that every sum is exact in fp32 whatever order a kernel adds in."""
        from qjit import w8a8

        gen = self.gen
        ints = lambda *shape: torch.randint(-2, 3, shape, generator=gen).to("cuda", torch.float16)  # noqa: E731
        lin = random_quant_linear(512, 256, gen, bias=True)
        lin.scales.fill_(1 / 16)
        lin.bias.copy_(ints(256))
        layer = AwqLayer(512, 256, 128, gen)
        qw, qz, s = layer.awq_tensors()
        wq, ws, wo, wsum = w8a8.pack_weights(self.randn(256, 512).float() / 512 ** 0.5, 128)
        conv = qjit.nn.QConv2d.from_float(torch.nn.Conv2d(64, 32, 3, padding=1).to("cuda"))
        x = ints(3, 512)
        cases = {
            "wq_gemm": dict(x=x, qweight=lin.qweight, scales=lin.scales, zeros=lin.zeros, bias=lin.bias, act="relu"),
            "awq_dequant": dict(qweight=qw, qzeros=qz, scales=s),
            "fused_ffn": dict(x=x[:2], w1=ints(256, 512) / 16, w3=ints(256, 512) / 16),
            "fp_lut": dict(x=self.randn(7, 33), fn="gelu"),
            "w8a8_gemm": dict(x=x, wq=wq, w_scale=ws, w_offset=wo, w_sum=wsum),
            "qconv2d": dict(x=ints(2, 64, 9, 9), qweight=conv.qweight, scales=conv.scales, offsets=conv.offsets,
                            kernel_size=[3, 3], stride=[1, 1], padding=[1, 1], dilation=[1, 1]),
        }
        for name, kwargs in cases.items():
            result = torch.library.opcheck(getattr(torch.ops.qjit, name).default, (), kwargs, raise_exception=False)
            self.assertEqual(set(result.values()), {"SUCCESS"}, "%s: %s" % (name, result))


def measure_launch_overhead():
    """The host time of one cache-hit call (enqueue only, median of 7 batches of 1000) of dense fused_ffn,
    d=4096, h=11008, M=1, from Python (with out=, allocating, the bare ctypes call of the positional entry
    and of the struct one, qjit_dense_ffn, the package's) and from C++
    (qjit_launch_probe), in one process run. A benchmark, not a test: tests/gpu_python.sh runs it after
    the tests and the result line goes to $QJIT_PY_RESULTS."""
    probe = os.environ.get("QJIT_LAUNCH_PROBE") or os.path.join(REPO, ".dist", "bin", "qjit_launch_probe")
    if not os.path.exists(probe):
        print("no qjit_launch_probe at %s: launch overhead not measured" % probe)
        return None
    gen = torch.Generator().manual_seed(5)
    d, h, m = 4096, 11008, 1
    x, w1, w3 = (torch.randn(*shape, generator=gen).to("cuda", torch.float16) for shape in ((m, d), (h, d), (h, d)))
    y = torch.empty(m, h, device="cuda", dtype=torch.float16)

    def per_call(f):
        f()
        torch.cuda.synchronize()
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(1000):
                f()
            times.append((time.perf_counter() - t0) * 1e3)  # µs per call
            torch.cuda.synchronize()
        return sorted(times)[3]

    bare = qjit._lib.function("qjit_fused_ffn")
    stream = torch.cuda.current_stream().cuda_stream
    args = (d, h, m, b"fp16", b"silu", x.data_ptr(), w1.data_ptr(), w3.data_ptr(), y.data_ptr(), stream)
    # The struct form the package calls (qjit_dense_ffn, packed once here).
    dense = qjit._lib.function("qjit_dense_ffn")
    packed = qjit._lib.packer(qjit._lib.DenseFfnArgs)(d, h, m, qjit.ops._p("fp16"), qjit.ops._p("silu"), x.data_ptr(),
                                                        w1.data_ptr(), w3.data_ptr(), y.data_ptr())
    py_out = per_call(lambda: qjit.fused_ffn(x, w1, w3, out=y))
    py_alloc = per_call(lambda: qjit.fused_ffn(x, w1, w3))
    py_ctypes = per_call(lambda: bare(*args))
    py_ctypes_struct = per_call(lambda: dense(packed, stream))
    cpp = json.loads(subprocess.run([probe, str(d), str(h), str(m), "fp16"], stdout=subprocess.PIPE,
                                    universal_newlines=True, check=True).stdout.strip().splitlines()[-1])
    result = {"test": "launch_overhead", "device": torch.cuda.get_device_name(), "d": d, "h": h, "m": m,
              "cpp_hit_us": cpp["hit_overhead_us"], "cpp_bare_launch_us": cpp["bare_launch_us"],
              "py_out_us": round(py_out, 2), "py_alloc_us": round(py_alloc, 2), "py_ctypes_us": round(py_ctypes, 2),
              "py_ctypes_struct_us": round(py_ctypes_struct, 2),
              "py_minus_cpp_us": round(py_out - cpp["hit_overhead_us"], 2)}
    record(result)
    return result


if __name__ == "__main__" and CUDA:
    measure_launch_overhead()


def load_npy_int32(path):
    """An int32 .npy file (format 1.0/2.0, little-endian, C order) as a torch tensor."""
    with open(path, "rb") as f:
        blob = f.read()
    assert blob[:6] == b"\x93NUMPY", path
    major = blob[6]
    hlen = int.from_bytes(blob[8:10], "little") if major == 1 else int.from_bytes(blob[8:12], "little")
    start = (10 if major == 1 else 12) + hlen
    header = blob[start - hlen:start].decode("latin1")
    assert "'<i4'" in header and "'fortran_order': False" in header, header
    return torch.frombuffer(bytearray(blob[start:]), dtype=torch.int32)


@unittest.skipUnless(CUDA, "needs torch with a CUDA device")
class LlamaMlpEndToEnd(unittest.TestCase):
    """A Llama-style MLP, down(SiLU(gate(x)) ⊙ up(x)), from an AWQ checkpoint written here.

    It tunes with a candidate count, not a time: `--budget 10s` failed on the
    H200 because compiling wq_gemm's 1128 candidates (about 20 a second on
    16 threads) used the whole budget and none was measured ("no candidate
    ... compiled, ran and verified"). `--budget 160` tunes the first 160
    candidates of each spec and M in the tuner's order: the cuBLAS family
    first (4), then the small-M mainloop, whose default config is number 117
    of wq_gemm's list at M = 1 and 157 at M = 16 (both specs here), and 89
    of fused_ffn's (`qjit source --op wq_gemm --shape ... --m 16 --configs`
    lists them; `qjit source` without --config prints the default). So every
    tune measures the default and cuBLAS, and its winner is at least as fast
    as the untuned kernel. About 8 s of compiling per spec and M on the H200.
    """

    def test_awq_checkpoint_to_qjit_nn(self):
        d, h, g = 1024, 2816, 128
        gen = torch.Generator().manual_seed(42)
        layers = {"gate_proj": AwqLayer(d, h, g, gen), "up_proj": AwqLayer(d, h, g, gen),
                  "down_proj": AwqLayer(h, d, g, gen)}
        budget = os.environ.get("QJIT_TUNE_BUDGET", "160")  # candidates: see the class's docstring
        with tempfile.TemporaryDirectory() as tmp:
            ckpt, native = os.path.join(tmp, "model.safetensors"), os.path.join(tmp, "native.safetensors")
            manifest, config = os.path.join(tmp, "specs.jsonl"), os.path.join(tmp, "config.json")
            tensors = {}
            for name, L in layers.items():
                qw, qz, s = L.awq_tensors()
                prefix = "model.layers.0.mlp." + name
                tensors.update({prefix + ".qweight": st.from_torch(qw), prefix + ".qzeros": st.from_torch(qz),
                                prefix + ".scales": st.from_torch(s)})
            st.write(ckpt, tensors)
            with open(config, "w") as f:
                json.dump({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": g,
                                                   "version": "gemm", "zero_point": True}}, f)
            summary = qjit.repack_checkpoint(ckpt, native, config=config, manifest=manifest)
            self.assertEqual(summary["layers"], 3)
            t0 = time.time()
            for spec in summary["specs"]:
                qjit.tune("wq_gemm", spec["shape"], m="1,16", budget=budget)
            qjit.tune("fused_ffn", "d=%d,h=%d,weights=native,bits=4,g=%d,zero=int" % (d, h, g), m=1, budget=budget)
            record({"test": "llama_mlp_tune", "seconds": round(time.time() - t0, 1)})
            p = "model.layers.0.mlp."
            gate, up, down = (qjit.nn.QuantLinear.from_checkpoint(native, p + n) for n in ("gate_proj", "up_proj",
                                                                                          "down_proj"))
        mlp_up = qjit.nn.FusedFFN.from_quant(gate, up)
        W = {n: L.w for n, L in layers.items()}
        for m in (1, 4, 16):
            x = torch.randn(m, d, generator=gen).to("cuda", torch.float16)
            y = down(mlp_up(x))
            ref = (F.silu(x.float() @ W["gate_proj"]) * (x.float() @ W["up_proj"])) @ W["down_proj"]
            rel = close(self, y, ref, 2e-2, "Llama MLP m=%d" % m)
            record({"test": "llama_mlp", "m": m, "max_err_over_max_ref": rel})


if __name__ == "__main__":
    unittest.main()
