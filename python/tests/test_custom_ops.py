"""torch.ops.qjit (qjit/custom_ops.py) without a GPU. The tests that need
torch are skipped without it (CI); those of the module's import without a
usable torch run everywhere. The GPU side (compiled and CUDA-graph outputs
against eager ones, opcheck on real tensors) is test_gpu.py's GpuCompile.

- every op of qjit.ops is registered, with a functional schema;
- each op on valid arguments, four ways: qjit.ops' function and the custom
  op's real implementation on CPU tensors posing as cuda:0
  (support.TorchAsCuda: the launches recorded), which must launch the same
  thing; its fake implementation on meta tensors and under FakeTensorMode
  (CUDA fake tensors), which must give the eager output's shape and dtype;
- on bad arguments the fake implementation raises the eager path's
  TypeError or ValueError, message for message;
- torch.library.opcheck on meta tensors (schema, fake, AOT dispatch);
- a model of qjit.nn modules: torch.compile(fullgraph=True) (a backend that
  keeps the graph, and aot_eager) and torch.export trace it into torch.ops.qjit
  calls, a dynamic batch staying symbolic; inductor's generated code launches
  what the eager forward launches; the eager forward never calls them;
- without torch, or with a torch older than 2.4: the module imports,
  registers nothing and says why.
"""
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..")
sys.path.insert(0, PACKAGE)
sys.path.insert(0, HERE)
import qjit  # noqa: E402
from support import Fields, TorchAsCuda, decoded  # noqa: E402

try:
    import torch

    from qjit import custom_ops
except ImportError:
    torch = None

REGISTERED = torch is not None and custom_ops.unavailable is None


def wq_cases(T):
    return [
        dict(x=T("float16", 2, 3, 256), qweight=T("int32", 2048), scales=T("float16", 2, 64),
             zeros=T("uint8", 2, 64), bias=T("float16", 64), act="relu"),
        dict(x=T("bfloat16", 5, 256), qweight=T("int32", 1024), scales=T("bfloat16", 4, 64), zero="sym", g=64,
             bits=2, residual=T("bfloat16", 5, 64)),
        dict(x=T("float32", 1, 256), qweight=T("int32", 4096), scales=T("float16", 2, 64), zero="float",
             zeros=T("float16", 2, 64), bits=8, act="relu6"),
    ]


def awq_cases(T):
    return [
        dict(qweight=T("int32", 256, 8), qzeros=T("int32", 2, 8), scales=T("float16", 2, 64)),
        dict(qweight=T("int32", 256, 8), qzeros=T("int32", 2, 8), scales=T("float16", 2, 64), out_dtype="bf16"),
        dict(qweight=T("int32", 32, 64), qzeros=None, scales=T("bfloat16", 2, 64), layout="gptq", symmetric=True),
    ]


def ffn_cases(T):
    return [
        dict(x=T("float16", 1, 256), w1=T("float16", 512, 256), w3=T("float16", 512, 256)),
        dict(x=T("float32", 3, 1, 256), w1=T("float16", 512, 256), w3=T("float16", 512, 256), act="silu_lut"),
        dict(x=T("float16", 2, 256), w1=T("int32", 16384), w3=T("int32", 16384), scales1=T("float16", 2, 512),
             zeros1=T("uint8", 2, 512), scales3=T("float16", 2, 512), zeros3=T("uint8", 2, 512)),
    ]


def lut_cases(T):
    return [dict(x=T("float16", 3, 5, 7), fn="gelu"),
            dict(x=T("bfloat16", 9), fn="silu", cuts="seed", out_dtype="fp32")]


def gru_cases(T):
    def gru(**over):
        a = dict(x=T("int32", 10, 2, 16), h0=T("int32", 2, 8), W=T("int8", 24, 16), R=T("int8", 24, 8),
                 bw=T("int32", 24), br=T("int32", 24), params='{"input_size": 16, "hidden_size": 8}')
        a.update(over)
        return a

    return [gru(), gru(float_out=True)]


def w8_cases(T):
    return [
        dict(x=T("float16", 2, 3, 256), wq=T("int8", 64, 256), w_scale=T("float32", 2, 64),
             w_offset=T("float32", 2, 64), w_sum=T("int32", 2, 64), bias=T("float16", 64), act="relu"),
        dict(x=T("float32", 4, 256), wq=T("int8", 64, 256), w_scale=T("float32", 4, 64), block=64,
             quant_a="symmetric"),
        dict(x=T("bfloat16", 4, 256), wq=T("float8_e4m3fn", 128, 256), w_scale=T("float32", 2, 1)),
    ]


def conv_cases(T):
    return [
        dict(x=T("float16", 2, 64, 15, 15), qweight=T("uint8", 32, 3, 3, 32), scales=T("float32", 32, 2),
             offsets=T("float32", 32, 2), bias=T("float32", 32), kernel=(3, 3), stride=(2, 2), padding=(1, 1),
             dilation=(1, 1)),
        dict(x=T("float32", 1, 9, 9, 64), qweight=T("int8", 16, 1, 3, 64), scales=T("float32", 16, 1),
             offsets=T("float32", 16, 1), bits=8, block=64, kernel=[1, 3], stride=[1, 1], padding=[0, 1],
             dilation=[1, 1], layout="nhwc", act="relu"),
    ]


# The custom ops' argument names where they differ from qjit.ops' (custom_ops.py says why).
RENAMED = {"qconv2d": {"kernel": "kernel_size"}}


def custom(op):
    """torch.ops.qjit.<op>, called with qjit.ops' argument names."""
    renamed = RENAMED.get(op, {})
    return lambda **a: getattr(torch.ops.qjit, op)(**{renamed.get(k, k): v for k, v in a.items()})


CASES = {"wq_gemm": wq_cases, "awq_dequant": awq_cases, "fused_ffn": ffn_cases, "fp_lut": lut_cases,
         "gru_quant": gru_cases, "w8a8_gemm": w8_cases, "qconv2d": conv_cases}


def tensors_on(device):
    """T(dtype name, *shape): an uninitialised tensor on `device` (cuda under a FakeTensorMode)."""
    return lambda dtype, *shape: torch.empty(shape, dtype=getattr(torch, dtype), device=device)


def outputs(op, y):
    """An op's outputs as a tuple: gru_quant's custom op gives (y, y_float), y_float empty [0] without float_out."""
    if not isinstance(y, tuple):
        return (y,)
    return y if op != "gru_quant" or y[1].numel() else y[:1]


def described(ys):
    return [(tuple(y.shape), y.dtype) for y in ys]


@unittest.skipUnless(REGISTERED, "needs torch >= 2.4")
class Registration(unittest.TestCase):
    def test_every_op_is_a_functional_custom_op(self):
        public = [name for name in qjit.__all__ if callable(getattr(qjit.ops, name, None))]
        self.assertEqual(sorted(public), sorted(custom_ops.NAMES))
        self.assertEqual(sorted(CASES), sorted(custom_ops.NAMES))
        for name in custom_ops.NAMES:
            op = getattr(torch.ops.qjit, name)
            self.assertIs(custom_ops.ops, torch.ops.qjit)
            schema = op.default._schema
            self.assertFalse(schema.is_mutable, name)
            self.assertNotIn("out", [a.name for a in schema.arguments], name)
            self.assertTrue(torch.Tag.pt2_compliant_tag in op.default.tags, name)


@unittest.skipUnless(REGISTERED, "needs torch >= 2.4")
class EachOpFourWays(unittest.TestCase):
    def eager(self, op, args, call):
        """call(**args) with CPU tensors posing as cuda:0: (outputs, launches with the outputs' pointers named)."""
        with TorchAsCuda() as pose:
            ys = outputs(op, call(**args))
        names = {y.data_ptr(): "output %d" % i for i, y in enumerate(ys)}
        named = lambda v: names.get(v, v)  # noqa: E731
        return ys, [tuple(tuple(map(named, a.values())) if isinstance(a, Fields) else named(a) for a in launch)
                    for launch in pose.launches]

    def test_real_and_fake_implementations_agree_with_eager(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        for op, cases in CASES.items():
            for i in range(len(cases(tensors_on("meta")))):
                case = lambda T, _i=i: cases(T)[_i]  # noqa: E731
                what = "%s case %d" % (op, i)
                args = case(tensors_on("cpu"))
                want, launched = self.eager(op, args, getattr(qjit, op))
                self.assertEqual(len(launched), 1, what)
                ys, via_op = self.eager(op, args, custom(op))
                self.assertEqual(via_op, launched, what + ": the custom op's real implementation")
                self.assertEqual(described(ys), described(want), what)
                meta = outputs(op, custom(op)(**case(tensors_on("meta"))))
                self.assertEqual(described(meta), described(want), what + " on meta tensors")
                self.assertTrue(all(y.device.type == "meta" for y in meta), what)
                with FakeTensorMode():
                    fake = outputs(op, custom(op)(**case(tensors_on("cuda"))))
                self.assertEqual(described(fake), described(want), what + " under FakeTensorMode")
                self.assertEqual([str(y.device) for y in fake], ["cuda:0"] * len(fake), what)

    def test_fake_refusals_are_the_eager_ones(self):
        """Bad arguments: the fake implementation (FakeTensorMode, CUDA tensors) raises what qjit.ops raises on the
        same arguments (CPU tensors posing as cuda:0), type and message."""
        from torch._subclasses.fake_tensor import FakeTensorMode

        def change(op, i, **over):
            def case(T):
                a = CASES[op](T)[i]
                a.update({k: v(T) if callable(v) else v for k, v in over.items()})
                return a
            return op, case

        bad = [
            change("wq_gemm", 0, scales=lambda T: T("float16", 3, 64)),
            change("wq_gemm", 0, x=lambda T: T("float64", 2, 256)),
            change("wq_gemm", 0, x=lambda T: T("float16", 256, 2).t()),
            change("wq_gemm", 1, residual=lambda T: T("bfloat16", 5, 32)),
            change("awq_dequant", 0, qzeros=lambda T: T("uint8", 2, 8)),
            change("fused_ffn", 0, x=lambda T: T("float16", 9, 256)),
            change("fused_ffn", 2, zeros3=None),
            change("fp_lut", 0, x=lambda T: T("int32", 4)),
            change("gru_quant", 0, h0=lambda T: T("int32", 3, 8)),
            change("w8a8_gemm", 0, w_sum=None),
            change("w8a8_gemm", 2, w_scale=lambda T: T("float32", 2, 2)),
            change("qconv2d", 0, x=lambda T: T("bfloat16", 2, 64, 15, 15)),
            change("qconv2d", 0, stride=(0, 1)),
        ]
        logging.getLogger("torch._subclasses.fake_tensor").disabled = True  # it logs each TypeError with its stack
        self.addCleanup(setattr, logging.getLogger("torch._subclasses.fake_tensor"), "disabled", False)
        for op, case in bad:
            with TorchAsCuda():
                with self.assertRaises((TypeError, ValueError)) as eager:
                    getattr(qjit, op)(**case(tensors_on("cpu")))
            with FakeTensorMode():
                with self.assertRaises(type(eager.exception)) as fake:
                    custom(op)(**case(tensors_on("cuda")))
            self.assertEqual(str(fake.exception), str(eager.exception))
            self.assertTrue(str(fake.exception).startswith(op + ": "), str(fake.exception))

    def test_cpu_tensors_are_refused_by_both_implementations(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        case = wq_cases
        with self.assertRaisesRegex(ValueError, "^wq_gemm: x is on cpu; expected a CUDA tensor$"):
            torch.ops.qjit.wq_gemm(**case(tensors_on("cpu"))[0])  # the real implementation
        with FakeTensorMode():
            with self.assertRaisesRegex(ValueError, "^wq_gemm: x is on cpu; expected a CUDA tensor$"):
                torch.ops.qjit.wq_gemm(**case(tensors_on("cpu"))[0])

    def test_opcheck_on_meta_tensors(self):
        """The schema (nothing mutated or aliased), the fake implementation and AOT dispatch with dynamic shapes;
        on meta tensors the "real" run is the fake one (test_gpu.py's GpuCompile runs opcheck on CUDA)."""
        for op, cases in CASES.items():
            renamed = RENAMED.get(op, {})
            for case in cases(tensors_on("meta")):
                kwargs = {renamed.get(k, k): v for k, v in case.items()}
                result = torch.library.opcheck(getattr(torch.ops.qjit, op).default, (), kwargs, raise_exception=False)
                self.assertEqual(set(result.values()), {"SUCCESS"}, "%s: %s" % (op, result))


GRU_PARAMS = {"input_size": 16, "hidden_size": 8,
              "tensors": {"x": {"bits": 8, "signed": True, "shift": 6, "zp": 0},
                          "h": {"bits": 8, "signed": True, "shift": 7, "zp": 0}}}


def model(device):
    """A small model of every qjit.nn module (buffers uninitialised: only shapes matter here)."""
    import qjit.nn as qnn

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            d = dict(device=device)
            self.lin = qnn.QuantLinear(256, 128, bias=True, **d)
            self.ffn = qnn.FusedFFN.from_quant(qnn.QuantLinear(128, 256, **d), qnn.QuantLinear(128, 256, **d))
            self.dense = qnn.FusedFFN.from_dense(torch.empty(128, 256, dtype=torch.float16, **d),
                                                 torch.empty(128, 256, dtype=torch.float16, **d))
            self.w8 = qnn.W8A8Linear(128, 128, bias=True, **d)
            self.conv = qnn.QConv2d(64, 32, 3, padding=1, act="relu", **d)
            i8, i32 = dict(dtype=torch.int8, **d), dict(dtype=torch.int32, **d)
            self.gru = qnn.QuantGRU(GRU_PARAMS, torch.zeros(24, 16, **i8), torch.zeros(24, 8, **i8),
                                    torch.zeros(24, **i32), torch.zeros(24, **i32))

        def forward(self, x, img, seq, h0):
            y = self.w8(self.dense(self.ffn(self.lin(x)))) + 1
            out, h = self.gru(seq, h0)
            return y, self.conv(img), out, h

    return Model()


def inputs(device, batch=2):
    """x, a channels_last image batch, a GRU sequence and its h0."""
    img = torch.empty(batch, 64, 8, 8, dtype=torch.float16, device=device)
    return (torch.empty(batch, 256, dtype=torch.float16, device=device),
            img.contiguous(memory_format=torch.channels_last),
            torch.zeros(5, batch, 16, device=device), torch.zeros(1, batch, 8, device=device))


QJIT_CALLS = ["qjit." + name for name in ("wq_gemm", "fused_ffn", "fused_ffn", "w8a8_gemm", "gru_quant", "qconv2d")]


def qjit_calls(graph):
    """The targets of graph's calls of torch.ops.qjit ("qjit.wq_gemm", or "qjit.wq_gemm.default" after AOT)."""
    return [str(n.target) for n in graph.nodes if n.op == "call_function" and str(n.target).startswith("qjit.")]


@unittest.skipUnless(REGISTERED, "needs torch >= 2.4")
class Tracing(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()

    def test_compile_fullgraph_records_the_custom_ops(self):
        graphs = []

        def keep(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        m = model("meta")
        compiled = torch.compile(m, backend=keep, fullgraph=True)
        y, conv, out, h = compiled(*inputs("meta"))
        self.assertEqual(described((y, conv, out, h)), [((2, 128), torch.float16), ((2, 32, 8, 8), torch.float16),
                                                       ((5, 2, 8), torch.float32), ((1, 2, 8), torch.float32)])
        self.assertTrue(conv.is_contiguous(memory_format=torch.channels_last))
        (gm,) = graphs
        self.assertEqual(qjit_calls(gm.graph), QJIT_CALLS)

    def test_aot_eager_and_a_dynamic_batch(self):
        m = model("meta")
        compiled = torch.compile(m, backend="aot_eager", fullgraph=True, dynamic=True)
        for batch in (2, 3, 5):
            y, conv, out, _ = compiled(*inputs("meta", batch))
            self.assertEqual(y.shape[0], batch)
            self.assertEqual((y.shape[0], conv.shape[0], out.shape[1]), (batch, batch, batch))

    def test_export_with_fake_cuda_tensors_and_a_dynamic_batch(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            m, args = model("cuda"), inputs("cuda")
        batch = torch.export.Dim("batch", min=2, max=8)
        ep = torch.export.export(m, args, dynamic_shapes={"x": {0: batch}, "img": {0: batch}, "seq": {1: batch},
                                                          "h0": {1: batch}})
        self.assertEqual(qjit_calls(ep.graph), [t + ".default" for t in QJIT_CALLS])
        y = [n for n in ep.graph.nodes if n.op == "output"][0].args[0][0].meta["val"]
        self.assertIsInstance(y.shape[0], torch.SymInt)  # the batch stays symbolic through the fake implementations

    def test_inductor_launches_what_eager_launches(self):
        """torch.compile's default backend (inductor, here generating CPU code) calls the real implementations
        from its generated code: each call launches what eager does, but for pointers, at every batch size.
        CPU tensors stand for CUDA ones by letting the checks take them (the real implementations run qjit.ops
        on them, launches recorded); the GPU machine's GpuCompile runs the kernels."""
        from ctypes import c_void_p

        from qjit import _check, ops

        def values(launch):  # a launch's plain values: its entry, and its struct's fields that are not pointers
            (_, entry, *a) = launch
            if entry == "qjit_fp_lut":  # positional: fn, n, x dtype, out dtype, cuts, x, y
                return entry, tuple(a[:5])
            return entry, tuple(v for (name, t), v in zip(a[0]._fields_, a[0].values()) if t is not c_void_p)

        def lut_and_dequant(x, qweight, qzeros, scales):  # the two ops no module calls
            return torch.ops.qjit.fp_lut(x * 2, "gelu"), torch.ops.qjit.awq_dequant(qweight, qzeros, scales) + 1

        init, launch = _check.Checker.__init__, ops._launch
        launches = []

        def on_cpu_too(checker, op, fake=False):
            init(checker, op, fake)
            checker.devices += ("cpu",)

        _check.Checker.__init__ = on_cpu_too
        ops._launch = lambda index, entry, *args: launches.append((index, entry) + decoded(entry, args))
        try:
            T = tensors_on("cpu")
            awq = (T("int32", 256, 8), T("int32", 2, 8), T("float16", 2, 64))
            for f, make_inputs in ((model("cpu"), lambda b: inputs("cpu", b)),
                                   (lut_and_dequant, lambda b: (T("float16", b, 7),) + awq)):
                compiled = torch.compile(f, fullgraph=True)
                with torch.no_grad():
                    for batch in (2, 3, 2):
                        x = make_inputs(batch)
                        f(*x)
                        eager = [values(a) for a in launches]
                        launches.clear()
                        compiled(*x)
                        # inductor may order independent calls otherwise (the GRU's and the image's)
                        self.assertEqual(sorted(values(a) for a in launches), sorted(eager), "batch %d" % batch)
                        launches.clear()
        finally:
            _check.Checker.__init__, ops._launch = init, launch

    def test_eager_forward_calls_no_custom_op(self):
        import qjit.nn as qnn

        class Refuse:
            def __getattr__(self, name):
                raise AssertionError("eager forward called torch.ops.qjit." + name)

        saved, qnn._qjit = qnn._qjit, Refuse()
        try:
            m = model("cpu")
            with TorchAsCuda() as pose, torch.no_grad():
                m(*inputs("cpu"))
        finally:
            qnn._qjit = saved
        self.assertEqual([launch[1] for launch in pose.launches],
                         ["qjit_wq_gemm", "qjit_quant_ffn", "qjit_dense_ffn", "qjit_w8a8_gemm", "qjit_gru_quant",
                          "qjit_qconv2d"])


STUB = {  # torch stand-ins for a subprocess: none importable, and one older than 2.4
    "none": "raise ImportError('No module named torch')\n",
    "old": "__version__ = '2.3.1'\nimport types\nlibrary = types.SimpleNamespace(impl=None)\n",
}


class WithoutUsableTorch(unittest.TestCase):
    """qjit.custom_ops imports without torch or with an older one, registers nothing, and says why (a subprocess
    whose `torch` is a stand-in)."""

    def run_with(self, stub):
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "torch"))
            with open(os.path.join(tmp, "torch", "__init__.py"), "w") as f:
                f.write(STUB[stub])
            code = textwrap.dedent("""
                import qjit.custom_ops as c
                print(c.unavailable)
                try:
                    c.ops.wq_gemm
                except AttributeError as e:
                    print(e)
            """)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, PACKAGE]))
            r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True, env=env)
        self.assertEqual(r.returncode, 0, r.stdout)
        return r.stdout.splitlines()

    def test_without_torch(self):
        why, error = self.run_with("none")
        self.assertEqual(why, "qjit's custom ops need PyTorch (pip install torch)")
        self.assertEqual(error, "torch.ops.qjit.wq_gemm is not registered: " + why)

    def test_with_torch_older_than_2_4(self):
        why, error = self.run_with("old")
        self.assertTrue(why.startswith("torch.ops.qjit needs torch 2.4 or newer"), why)
        self.assertIn("this is torch 2.3.1", why)
        self.assertEqual(error, "torch.ops.qjit.wq_gemm is not registered: " + why)


if __name__ == "__main__":
    unittest.main()
