"""Whole models without a GPU: qjit.nn.quantize_model, load_quantized and
load_dequantized on a small random transformers LlamaForCausalLM built from a
LlamaConfig (support.tiny_llama). Skipped without torch and transformers
(CI); the GPU side, with the kernels, is test_gpu_model.py. (qjit.wq, the
4-bit packer, is test_nn_modules.py's.)

- quantize_model: which modules are replaced and by what (the head and the
  embeddings left alone), the buffers bit-exact against the packers, skip
  patterns, and errors naming the layer before anything is replaced;
- load_quantized from an AWQ checkpoint written here: layer names mapped to
  the model's modules, the `qjit repack` command's native words equal to
  qjit.wq.pack's of the same codes, tensors equal to quantize_model's of the
  same weights, the other tensors loaded, mismatches named;
- generate() greedy and sampling, eager and under torch.compile(fullgraph=True,
  aot_eager), with the kernels replaced by torch references of the same math
  (EmulatedKernels): the converted model gives its float twin's tokens, the
  MLP takes fused_ffn for a decode step and wq_gemm for a prefill, and a
  decoder layer traces with no graph break.
"""
import copy
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import qjit  # noqa: E402
from support import CliTest, have_transformers, tiny_llama  # noqa: E402

HAVE = have_transformers()
if HAVE:
    import torch
    import torch.nn.functional as F

    import qjit.nn as qnn
    from qjit import w8a8, wq

LAYER_NAMES = ["model.layers.%d.%s" % (i, n) for i in range(2) for n in (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
    "mlp.down_proj")]


@unittest.skipUnless(HAVE, "needs torch and transformers")
class QuantizeModel(unittest.TestCase):
    def test_int4_replaces_every_linear_but_the_head(self):
        model = tiny_llama(dtype=torch.float16)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        replaced = qnn.quantize_model(model, "int4")
        self.assertEqual(list(replaced), LAYER_NAMES)
        for i, layer in enumerate(model.model.layers):
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                self.assertIsInstance(getattr(layer.self_attn, name), qnn.QuantLinear)
            mlp = layer.mlp
            self.assertIsInstance(mlp, qnn.GatedMLP)
            self.assertIsInstance(mlp.ffn, qnn.FusedFFN)
            p = "model.layers.%d.mlp." % i
            self.assertIs(mlp.ffn.gate, replaced[p + "gate_proj"])
            self.assertIs(mlp.ffn.up, replaced[p + "up_proj"])
            self.assertIs(mlp.down_proj, replaced[p + "down_proj"])
        self.assertIs(type(model.lm_head), torch.nn.Linear)
        self.assertIsInstance(model.model.embed_tokens, torch.nn.Embedding)
        after = model.state_dict()
        for name in ("lm_head.weight", "model.embed_tokens.weight", "model.norm.weight",
                     "model.layers.1.input_layernorm.weight"):
            self.assertTrue(torch.equal(after[name], before[name]), name)
        for name, m in replaced.items():
            q, s, z = wq.quantize(before[name + ".weight"], 128)
            self.assertTrue(torch.equal(m.qweight, wq.pack(q)) and torch.equal(m.scales, s)
                            and torch.equal(m.zeros, z), name)
            self.assertTrue(torch.equal(wq.unpack(m.qweight, m.in_features, m.out_features), q), name)

    def test_w8a8_and_fp8(self):
        for scheme, fmt in (("w8a8", "int8"), ("fp8", "e4m3")):
            model = tiny_llama(dtype=torch.float16)
            weights = {n: model.get_submodule(n).weight.detach().clone() for n in LAYER_NAMES}
            replaced = qnn.quantize_model(model, scheme, quant_w="symmetric")
            self.assertEqual(list(replaced), LAYER_NAMES)
            self.assertEqual(type(model.model.layers[0].mlp).__name__, "LlamaMLP")  # no fused path for these
            self.assertIs(type(model.lm_head), torch.nn.Linear)
            for name, m in replaced.items():
                self.assertIsInstance(m, qnn.W8A8Linear)
                self.assertEqual(m.format, fmt)
                want = w8a8.pack_weights(weights[name], 128, "symmetric", fmt)
                self.assertTrue(torch.equal(m.wq.view(torch.uint8), want[0].view(torch.uint8)), name)
                self.assertTrue(torch.equal(m.w_scale, want[1]), name)

    def test_skip_patterns_and_unfused_mlps(self):
        model = tiny_llama()
        replaced = qnn.quantize_model(model, skip=("lm_head", "*.mlp.*"))
        self.assertEqual(list(replaced), [n for n in LAYER_NAMES if ".mlp." not in n])
        self.assertIs(type(model.model.layers[0].mlp.up_proj), torch.nn.Linear)
        model = tiny_llama()
        replaced = qnn.quantize_model(model, skip=("v_proj", "lm_head"), fuse_mlp=False)
        self.assertEqual(len(replaced), 12)
        self.assertIs(type(model.model.layers[1].self_attn.v_proj), torch.nn.Linear)
        self.assertIsInstance(model.model.layers[1].mlp.gate_proj, qnn.QuantLinear)
        self.assertEqual(type(model.model.layers[1].mlp).__name__, "LlamaMLP")
        model = tiny_llama()
        replaced = qnn.quantize_model(model, skip=())
        self.assertIsInstance(model.lm_head, qnn.QuantLinear)
        self.assertIn("lm_head", replaced)

    def test_a_layer_that_does_not_fit_is_named_and_nothing_replaced(self):
        cases = (("int4", dict(intermediate_size=200), {}, "layer model.layers.0.mlp.gate_proj \\(in_features=256, "
                  "out_features=200\\): QuantLinear: in_features=256, out_features=200; the native layout"),
                 ("int4", {}, dict(group_size=96), "layer model.layers.0.self_attn.q_proj .*group_size=96 must "
                  "divide in_features=256"),
                 ("fp8", dict(num_key_value_heads=1), {}, "layer model.layers.0.self_attn.k_proj .*format='e4m3' "
                  "takes block=128"),
                 ("w8a8", dict(hidden_size=320, num_attention_heads=5), {}, "layer model.layers.0.self_attn.q_proj "
                  ".*block=128; expected 32..512 dividing in_features=320"))
        for scheme, over, kwargs, words in cases:
            model = tiny_llama(**over)
            with self.assertRaisesRegex(ValueError, "quantize_model: " + words):
                qnn.quantize_model(model, scheme, **kwargs)
            self.assertEqual([type(m) for m in model.modules() if isinstance(m, torch.nn.Linear)],
                             [torch.nn.Linear] * 15, scheme)
        with self.assertRaisesRegex(ValueError, "quantize_model: scheme='int3'; expected one of 'int4', 'w8a8', 'fp8'"):
            qnn.quantize_model(tiny_llama(), "int3")


def write_awq_checkpoint(model, path, skip=("lm_head",), extra=None):
    """An AWQ checkpoint (.safetensors, AWQ's packing) of model's Linears but `skip`, quantized by qjit.wq (g 128),
    with every other tensor of the model's state_dict as it is, and `extra` {name: tensor}. Returns {layer: (q, s,
    z)}."""
    from test_gpu import pack_awq

    from qjit import safetensors as st

    tensors, layers = {}, {}
    state = model.state_dict()
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and not qnn._skipped(name, skip):
            q, s, z = wq.quantize(m.weight, 128)
            layers[name] = (q, s, z)
            tensors.update({name + ".qweight": pack_awq(q), name + ".qzeros": pack_awq(z), name + ".scales": s})
            state.pop(name + ".weight")
    tensors.update(state)
    tensors.update(extra or {})
    st.write(path, {k: st.from_torch(v) for k, v in tensors.items()})
    return layers


AWQ_CONFIG = {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm",
                                      "zero_point": True}}


@unittest.skipUnless(HAVE, "needs torch and transformers")
class LoadQuantized(CliTest):
    def config(self):
        path = self.file("config.json")
        with open(path, "w") as f:
            json.dump(AWQ_CONFIG, f)
        return path

    def test_awq_checkpoint_maps_layer_names(self):
        source = tiny_llama(seed=1, dtype=torch.float16, attention_bias=True)
        ckpt = self.file("model.safetensors")
        layers = write_awq_checkpoint(source, ckpt, extra={"model.extra": torch.zeros(3)})
        model = tiny_llama(seed=2, dtype=torch.float16, attention_bias=True)  # other weights: all must be loaded
        result = qnn.load_quantized(model, ckpt, config=self.config())
        self.assertEqual(list(result.replaced), LAYER_NAMES)
        self.assertEqual((result.missing, result.unexpected), ([], ["model.extra"]))
        for name, (q, s, z) in layers.items():
            m = result.replaced[name]
            self.assertTrue(torch.equal(m.qweight, wq.pack(q)) and torch.equal(m.scales, s)
                            and torch.equal(m.zeros, z), name)
        self.assertIsInstance(model.model.layers[0].mlp, qnn.GatedMLP)
        # the same model as quantize_model makes of the source, tensor for tensor (biases and the rest loaded)
        quantized = copy.deepcopy(source)
        qnn.quantize_model(quantized, "int4")
        want, got = quantized.state_dict(), model.state_dict()
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            self.assertTrue(torch.equal(got[name], want[name]), name)
        self.assertTrue(any(name.endswith("q_proj.bias") for name in got))

    def test_a_native_file_and_the_models_own_quantization_config(self):
        source = tiny_llama(seed=3)
        ckpt, native = self.file("model.safetensors"), self.file("native.safetensors")
        write_awq_checkpoint(source, ckpt)
        qjit.repack_checkpoint(ckpt, native, config=self.config())
        from_native = tiny_llama(seed=4)
        result = qnn.load_quantized(from_native, native)
        self.assertEqual((list(result.replaced), result.missing), (LAYER_NAMES, []))
        model = tiny_llama(seed=4)
        with self.assertRaisesRegex(ValueError, "is not a qjit-native file and nothing says its method"):
            qnn.load_quantized(model, ckpt)
        model.config.quantization_config = AWQ_CONFIG["quantization_config"]
        qnn.load_quantized(model, ckpt)
        for name, t in from_native.state_dict().items():
            self.assertTrue(torch.equal(model.state_dict()[name], t), name)

    def test_mismatches_name_the_layer_and_replace_nothing(self):
        cases = [(dict(num_hidden_layers=3), {}, "checkpoint layer model.layers.2.mlp.down_proj is no "
                  "torch.nn.Linear of LlamaForCausalLM; its closest are model.layers.1.mlp.down_proj"),
                 (dict(intermediate_size=640), {}, "layer model.layers.0.mlp.gate_proj is \\[K, N\\] = \\[256, 640\\] "
                  "in the checkpoint \\(20480 words, scales \\[2, 640\\]\\) but the model's Linear has "
                  "in_features=256, out_features=512"),
                 ({}, {"model.norm.weight": torch.ones(128)}, "tensor model.norm.weight is \\[128\\] in the checkpoint "
                  "but \\[256\\] in the model")]
        for i, (over, extra, words) in enumerate(cases):
            ckpt = self.file("bad%d.safetensors" % i)
            write_awq_checkpoint(tiny_llama(**over), ckpt, extra=extra)
            model = tiny_llama()
            with self.assertRaisesRegex(ValueError, "load_quantized: " + words):
                qnn.load_quantized(model, ckpt, from_="awq")
            self.assertEqual([type(m) for m in model.modules() if isinstance(m, torch.nn.Linear)],
                             [torch.nn.Linear] * 15, words)
        # a layer renamed in the checkpoint (not a module of the model)
        from qjit import safetensors as st

        t = st.read(ckpt)
        for suffix in ("qweight", "qzeros", "scales"):
            t["model.layers.0.mlp.gate." + suffix] = t.pop("model.layers.0.mlp.gate_proj." + suffix)
        st.write(ckpt, t)
        with self.assertRaisesRegex(ValueError, "checkpoint layer model.layers.0.mlp.gate is no torch.nn.Linear of "
                                                "LlamaForCausalLM; its closest are model.layers.0.mlp.gate_proj"):
            qnn.load_quantized(tiny_llama(), ckpt, from_="awq")


class EmulatedKernels:
    """While entered, the ops qjit.nn's modules call (wq_gemm, fused_ffn, w8a8_gemm) are torch references of
    their math on the weights the kernels multiply (qjit.wq / qjit.w8a8 dequantize, float32 products; x is not
    quantized for w8a8_gemm), both where the eager forward calls them (qjit.nn's names) and where the custom
    ops' real implementations do (qjit.ops'), and the fake implementations take CPU tensors: a converted model
    runs, eager and compiled, on the CPU. `calls` records (where, op, rows): where is "eager" or "custom_op"."""

    OPS = ("wq_gemm", "fused_ffn", "w8a8_gemm")

    def __init__(self):
        self.calls = []

    def wq_gemm(self, x, qweight, scales, zeros=None, *, bits=4, g=128, zero="int", bias=None, act="none",
                residual=None, out=None):
        y = self.linear(x, wq.dequantize(qweight, scales, zeros, zero), bias, act)
        return y if residual is None else (y.float() + residual.float()).to(x.dtype)

    def fused_ffn(self, x, w1, w3, *, scales1=None, zeros1=None, scales3=None, zeros3=None, bits=4, g=128,
                  zero="int", act="silu", out=None):
        if scales1 is not None:
            w1, w3 = wq.dequantize(w1, scales1, zeros1, zero), wq.dequantize(w3, scales3, zeros3, zero)
        return (F.silu(x.float() @ w1.float().t()) * (x.float() @ w3.float().t())).to(x.dtype)

    def w8a8_gemm(self, x, wq_, w_scale, w_offset=None, w_sum=None, *, block=128, quant_a="offset", format=None,
                  bias=None, act="none", out=None):
        return self.linear(x, w8a8.dequantize(wq_, w_scale, w_offset), bias, act)

    @staticmethod
    def linear(x, w, bias, act):
        y = x.float() @ w.t() + (bias.float() if bias is not None else 0)
        return {"none": y, "relu": torch.relu(y), "relu6": y.clamp(0, 6)}[act].to(x.dtype)

    def recorded(self, where, name):
        f = getattr(self, name)

        def call(x, *args, **kwargs):
            self.calls.append((where, name, x.numel() // x.shape[-1]))
            return f(x, *args, **kwargs)

        return call

    def __enter__(self):
        from qjit import _check, ops

        self.saved = [(m, name, getattr(m, name)) for m in (ops, qnn) for name in self.OPS]
        for name in self.OPS:
            setattr(qnn, name, self.recorded("eager", name))
            setattr(ops, name, self.recorded("custom_op", name))
        init = _check.Checker.__init__
        self.saved.append((_check.Checker, "__init__", init))

        def on_cpu_too(checker, op, fake=False):
            init(checker, op, fake)
            checker.devices += ("cpu",)

        _check.Checker.__init__ = on_cpu_too
        return self

    def __exit__(self, *exc):
        for owner, name, value in self.saved:
            setattr(owner, name, value)
        return False


def converted(scheme, seed=5):
    """(tiny Llama converted by quantize_model(scheme), its float twin: load_dequantized of a copy)."""
    model = tiny_llama(seed=seed)
    twin = copy.deepcopy(model)
    replaced = qnn.quantize_model(model, scheme)
    return model, qnn.load_dequantized(twin, replaced)


@unittest.skipUnless(HAVE, "needs torch and transformers")
class EmulatedGeneration(unittest.TestCase):
    """The converted models' wiring on the CPU, the kernels emulated in float32 as the twin computes: the same
    logits to float32 rounding, so the same tokens (greedy, and sampling from the same seed)."""

    def setUp(self):
        torch._dynamo.reset()
        self.kernels = EmulatedKernels().__enter__()
        self.addCleanup(self.kernels.__exit__)
        self.ids = torch.randint(1, 512, (2, 12), generator=torch.Generator().manual_seed(6))

    def generate(self, model, **kwargs):
        with torch.no_grad():
            return model.generate(self.ids, attention_mask=torch.ones_like(self.ids), max_new_tokens=6, **kwargs)

    def test_generate_eager_greedy_and_sampling(self):
        for scheme in qnn.SCHEMES:
            model, twin = converted(scheme)
            self.kernels.calls.clear()
            got = self.generate(model, do_sample=False)
            self.assertTrue(torch.equal(got, self.generate(twin, do_sample=False)), scheme)
            calls = sorted(set(self.kernels.calls))
            if scheme == "int4":  # prefill: 24 rows through two wq_gemm; decode steps: 2 rows, one fused_ffn
                self.assertEqual(calls, [("eager", "fused_ffn", 2), ("eager", "wq_gemm", 2), ("eager", "wq_gemm", 24)])
            else:
                self.assertEqual(calls, [("eager", "w8a8_gemm", 2), ("eager", "w8a8_gemm", 24)])
            with torch.no_grad():
                logits, want = model(self.ids).logits, twin(self.ids).logits
            self.assertLess(float((logits - want).abs().max()), 1e-4 * float(want.abs().max()), scheme)
            sampled = []
            for m in (model, twin):
                torch.manual_seed(7)
                sampled.append(self.generate(m, do_sample=True, top_k=50, temperature=0.8))
            self.assertTrue(torch.equal(*sampled), scheme)

    def test_generate_compiled(self):
        for scheme in ("int4", "w8a8"):
            torch._dynamo.reset()
            model, twin = converted(scheme)
            want = self.generate(twin, do_sample=False, cache_implementation="static")
            model.forward = torch.compile(model.forward, backend="aot_eager", fullgraph=True)
            self.kernels.calls.clear()
            got = self.generate(model, do_sample=False, cache_implementation="static")
            self.assertTrue(torch.equal(got, want), scheme)
            self.assertEqual({where for where, _, _ in self.kernels.calls}, {"custom_op"}, scheme)

    def test_a_decoder_layer_has_no_graph_break(self):
        for scheme, rows in (("int4", 1), ("int4", 12), ("fp8", 3)):
            torch._dynamo.reset()
            one_graph(self, converted(scheme)[0], scheme, rows)


def one_graph(test, model, scheme, rows):
    """torch._dynamo.explain of model's first decoder layer on x [1, rows, hidden] of the model's device and
    type: one graph, no graph break, and in it the torch.ops.qjit calls of the scheme (a GatedMLP's fused_ffn for
    1..8 rows, wq_gemm for more)."""
    p = next(model.parameters())
    layer = model.model.layers[0]
    h = torch.randn(1, rows, model.config.hidden_size, device=p.device, dtype=p.dtype)
    position = model.model.rotary_emb(h, torch.arange(rows, device=p.device)[None])
    with torch.no_grad():
        explained = torch._dynamo.explain(layer)(h, position_embeddings=position)
    test.assertEqual((explained.graph_break_count, explained.graph_count), (0, 1), explained.break_reasons)
    calls = [str(n.target) for n in explained.graphs[0].graph.nodes
             if n.op == "call_function" and str(n.target).startswith("qjit.")]
    if scheme != "int4":
        want = ["qjit.w8a8_gemm"] * 7
    else:
        want = ["qjit.wq_gemm"] * 4 + (["qjit.fused_ffn", "qjit.wq_gemm"] if rows <= 8 else ["qjit.wq_gemm"] * 3)
    test.assertEqual(calls, want, (scheme, rows))


if __name__ == "__main__":
    unittest.main()
