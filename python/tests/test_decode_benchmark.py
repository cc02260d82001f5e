"""python/benchmarks/decode.py without a GPU (skipped without torch and
transformers): its arguments, the Llama-2-7B shape it builds, its table and
JSON from --dry on a tiny model, and the harness end to end (generate timed
on one static cache, the twin's teacher-forced accuracy) on the CPU with the
kernels emulated (test_model.EmulatedKernels) and torch.cuda's timing calls
stubbed. The numbers themselves come from the GPU machine.
"""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))
sys.path.insert(0, HERE)
from support import have_transformers  # noqa: E402

HAVE = have_transformers()
if HAVE:
    import torch

    import decode


@unittest.skipUnless(HAVE, "needs torch and transformers")
class DecodeBenchmark(unittest.TestCase):
    def test_arguments_and_the_llama2_7b_shape(self):
        a = decode.parse_args([])
        self.assertEqual((a.layers, a.batch, a.prompt, a.new, a.variants, a.accuracy_steps, a.json, a.dry),
                         (32, [1, 16], 128, 256, list(decode.VARIANTS), 64, None, False))
        c = decode.llama_config(decode.parse_args(["--layers", "2"]))
        self.assertEqual((c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.num_attention_heads,
                          c.num_key_value_heads, c.vocab_size, c.eos_token_id), (2, 4096, 11008, 32, 32, 32000, None))
        self.assertEqual(decode.int4_specs(c), [
            ("wq_gemm", "k=4096,n=4096,g=128,bits=4,zero=int"), ("wq_gemm", "k=4096,n=11008,g=128,bits=4,zero=int"),
            ("wq_gemm", "k=11008,n=4096,g=128,bits=4,zero=int"),
            ("fused_ffn", "d=4096,h=11008,weights=native,bits=4,g=128,zero=int")])
        with redirect_stdout(io.StringIO()), open(os.devnull, "w") as null:
            saved, sys.stderr = sys.stderr, null
            try:
                for bad in (["--variants", "fp16,int3"], ["--new", "1"], ["--batch", ""]):
                    with self.assertRaises(SystemExit, msg=bad):
                        decode.parse_args(bad)
            finally:
                sys.stderr = saved

    def test_table(self):
        rows = [decode.row("fp16-graphs", 1, 8.0, 30.0), decode.row("qjit-int4", 1, 4.0, 20.0,
                                                                    {"rel_err_mean": 1e-3, "rel_err_max": 2e-3,
                                                                     "same_token": 0.984375}),
                decode.row("torch-int4", 16, note="failed: RuntimeError: no")]
        text = decode.table(rows, "# title").splitlines()
        self.assertEqual(text[0], "# title")
        self.assertEqual(text[2].split(), ["fp16-graphs", "1", "8.00", "125.0", "1.00x", "30.0", "-", "-"])
        self.assertEqual(text[3].split(), ["qjit-int4", "1", "4.00", "250.0", "2.00x", "20.0", "1.00e-03", "/",
                                           "2.00e-03", "98.4%"])
        self.assertEqual(text[4].split()[:3] + text[4].split()[-3:], ["torch-int4", "16", "-", "failed:",
                                                                      "RuntimeError:", "no"])

    def test_dry_run_builds_every_variant(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            out = io.StringIO()
            with redirect_stdout(out):
                decode.main(["--dry", "--tiny", "--layers", "1", "--json", path])
            with open(path) as f:
                doc = json.load(f)
        lines = out.getvalue().splitlines()
        self.assertTrue(lines[0].startswith("# decode: LlamaForCausalLM tiny, 1 layers (hidden 256"), lines[0])
        self.assertEqual(len(lines), 2 + 2 * len(decode.VARIANTS))
        self.assertEqual([(r["variant"], r["batch"]) for r in doc["rows"]],
                         [(v, b) for v in decode.VARIANTS for b in (1, 16)])
        self.assertEqual({r["note"] for r in doc["rows"]}, {"dry: built, not run"})
        self.assertEqual((doc["config"]["num_hidden_layers"], doc["config"]["hidden_size"], doc["args"]["dry"]),
                         (1, 256, True))

    def test_the_harness_end_to_end_with_emulated_kernels(self):
        import transformers
        from test_model import EmulatedKernels

        stubs = {"synchronize": lambda *a: None, "get_device_name": lambda *a: "cpu", "empty_cache": lambda: None,
                 "get_device_capability": lambda *a: (9, 0)}
        saved = {name: getattr(torch.cuda, name) for name in stubs}
        device, decode.DEVICE = decode.DEVICE, "cpu"
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # that it will not compile on the CPU
        try:
            for name, f in stubs.items():
                setattr(torch.cuda, name, f)
            with EmulatedKernels(), redirect_stdout(io.StringIO()):
                rows = decode.main(["--tiny", "--layers", "1", "--batch", "1,3", "--prompt", "5", "--new", "4",
                                    "--accuracy-steps", "3", "--reps", "1", "--variants", "fp16,qjit-int4,qjit-fp8"])
        finally:
            for name, f in saved.items():
                setattr(torch.cuda, name, f)
            decode.DEVICE = device
            transformers.logging.set_verbosity(verbosity)
        self.assertEqual([(r["variant"], r["batch"]) for r in rows],
                         [(v, b) for v in ("fp16", "qjit-int4", "qjit-fp8") for b in (1, 3)])
        for r in rows:
            self.assertEqual(r["note"], "", r)
            self.assertGreater(r["ms_per_token"], 0)
            if r["variant"] != "fp16":  # emulated in float32 against the fp16 twin: its roundings only
                self.assertLess(r["rel_err_max"], 1e-2, r)
                self.assertGreaterEqual(r["same_token"], 0.5, r)


if __name__ == "__main__":
    unittest.main()
