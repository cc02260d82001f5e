"""Each op's spec keys and call arguments are defined once, by its OpDef in
codegen (`qjit ops --json` prints them); the C header's argument structs
(runtime/include/qjit/qjit_c.h, which qjit/_lib.py mirrors field for field:
test_c_abi.py) are a copy. Here every key and argument of every op must have
its field in its struct, under its own name or one of the few spellings
listed below with the reason, so that a key added to an op and not to the C
API (or renamed on one side) fails on the CPU.

Needs the qjit command (QJIT_CLI, on the PATH or next to the library); CI
sets QJIT_REQUIRE_LIBRARY=1 to fail rather than skip without it.
"""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import qjit  # noqa: E402
from support import CliTest  # noqa: E402
from test_c_abi import header_structs, header_text  # noqa: E402

# op -> the structs of its entry points (fused_ffn has a dense and a quantized one; fp_lut's entry takes
# positional arguments, checked against the header's declaration by test_c_abi).
STRUCTS = {
    "fused_ffn": ["qjit_dense_ffn_args", "qjit_quant_ffn_args"],
    "wq_gemm": ["qjit_wq_gemm_args"],
    "awq_dequant": ["qjit_awq_dequant_args"],
    "gru_quant": ["qjit_gru_quant_args"],
    "w8a8_gemm": ["qjit_w8a8_gemm_args"],
    "qconv2d": ["qjit_qconv2d_args"],
}

# Spellings of a key or argument in the C structs, and why they differ from the op's name.
FIELD_OF = {
    # a pointer argument beside a yes/no key of the same name: the key is an int field, the tensor "_ptr"
    ("wq_gemm", "arg", "bias"): "bias_ptr",
    ("wq_gemm", "arg", "residual"): "residual_ptr",
    ("w8a8_gemm", "arg", "bias"): "bias_ptr",
    ("qconv2d", "arg", "bias"): "bias_ptr",
    # x, scales, out name tensors as arguments; the keys giving their types are "<name>_dtype"
    ("wq_gemm", "key", "x"): "x_dtype",
    ("wq_gemm", "key", "scales"): "scales_dtype",
    ("fused_ffn", "key", "scales"): "scales_dtype",
    ("awq_dequant", "key", "scales"): "scales_dtype",
    ("awq_dequant", "key", "out"): "out_dtype",
    ("w8a8_gemm", "key", "x"): "x_dtype",
    ("qconv2d", "key", "x"): "x_dtype",
    # fused_ffn's quantized struct numbers its matrices (W1 and W3 as qweight1 and qweight3)
    ("fused_ffn", "arg", "w1"): "qweight1",
    ("fused_ffn", "arg", "w3"): "qweight3",
    # awq_dequant's zero=sym|int as an int flag
    ("awq_dequant", "key", "zero"): "symmetric",
}

# Keys a struct has no field for, and why.
NOT_IN_C = {
    ("fused_ffn", "weights"): "which of the two entries is called (qjit_dense_ffn or qjit_quant_ffn)",
    ("wq_gemm", "layout"): "the C entry takes the native layout only (qjit repack converts the others)",
}


def ops_description():
    cli = qjit.find_cli()
    out = subprocess.run([cli, "ops", "--json"], stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return {o["op"]: o for o in json.loads(out)}


class OpDescriptions(CliTest):
    def test_ops_json_names_every_op_with_keys_and_arguments(self):
        ops = ops_description()
        self.assertEqual(sorted(ops), sorted(list(STRUCTS) + ["fp_lut"]))
        for name, o in ops.items():
            self.assertTrue(o["summary"], name)
            self.assertTrue(o["params"] and o["args"], name)
            for p in o["params"]:
                self.assertTrue(p["doc"], "%s.%s has no doc" % (name, p["name"]))
            self.assertEqual({a["kind"] for a in o["args"]} - {"pointer", "int32"}, set(), name)

    def test_every_key_and_argument_has_its_c_field(self):
        ops = ops_description()
        structs = header_structs(header_text())
        for op, names in STRUCTS.items():
            fields = set()
            for s in names:
                self.assertIn(s, structs, "%s's struct %s is not in qjit_c.h" % (op, s))
                fields |= set(structs[s])
            for what, items in (("key", [p["name"] for p in ops[op]["params"]]),
                                ("arg", [a["name"] for a in ops[op]["args"]])):
                for item in items:
                    if what == "key" and (op, item) in NOT_IN_C:
                        continue
                    field = FIELD_OF.get((op, what, item), item)
                    self.assertIn(field, fields, "%s %s %r has no field %r in %s" % (op, what, item, field, names))

    def test_the_exceptions_are_still_needed(self):
        """A spelling or exception listed above that the op no longer has is an error too (stale lists hide drift)."""
        ops = ops_description()
        for (op, what, item) in FIELD_OF:
            names = [p["name"] for p in ops[op]["params"]] if what == "key" else [a["name"] for a in ops[op]["args"]]
            self.assertIn(item, names, "FIELD_OF lists %s %s %r, which %s does not have" % (op, what, item, op))
        for (op, item) in NOT_IN_C:
            self.assertIn(item, [p["name"] for p in ops[op]["params"]], "NOT_IN_C lists %s %r" % (op, item))


if __name__ == "__main__":
    unittest.main()
