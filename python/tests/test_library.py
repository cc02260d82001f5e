"""libqjit_runtime.so loaded through qjit._lib, without a GPU: where it is
found, and the C library's own argument errors arriving as QjitArgumentError
(a ValueError) with qjit_last_error()'s text. These calls are refused before
any device is touched.

Uses $QJIT_LIBRARY, else the search of qjit._lib.find_library; with
QJIT_REQUIRE_LIBRARY=1 (CI) a missing library fails the tests instead of
skipping them.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qjit  # noqa: E402
from qjit import _lib  # noqa: E402
from support import need  # noqa: E402


class Finding(unittest.TestCase):
    def test_a_wrong_qjit_library_is_an_error(self):
        saved = os.environ.get("QJIT_LIBRARY")
        os.environ["QJIT_LIBRARY"] = "/nonexistent/libqjit_runtime.so"
        try:
            with self.assertRaisesRegex(qjit.QjitError, "QJIT_LIBRARY=/nonexistent/libqjit_runtime.so: no such file"):
                qjit.find_library()
        finally:
            if saved is None:
                del os.environ["QJIT_LIBRARY"]
            else:
                os.environ["QJIT_LIBRARY"] = saved


class CArgumentErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need(_lib.load)

    def refused(self, words, entry, *args):
        with self.assertRaises(qjit.QjitArgumentError) as cm:
            _lib.call(entry, *args)
        self.assertIsInstance(cm.exception, ValueError)
        self.assertEqual(cm.exception.status, "invalid_argument")
        for w in words:
            self.assertIn(w, str(cm.exception))

    def test_errors_carry_the_library_text(self):
        with self.assertRaisesRegex(qjit.QjitArgumentError, "empty path"):
            qjit.set_cache_path("")
        self.refused(["wq_gemm: args is null"], "qjit_wq_gemm", None, None)
        a = _lib.WqGemmArgs(k=4096, n=4096, bits=4, g=128, x_dtype=b"int4")
        self.refused(["x_dtype 'int4'"], "qjit_wq_gemm", a, None)
        self.refused(["scales_dtype 'mixed'"], "qjit_awq_dequant", _lib.AwqDequantArgs(scales_dtype=b"mixed"), None)
        self.refused(["act 'gelu'"], "qjit_quant_ffn", _lib.QuantFfnArgs(act=b"gelu"), None)
        self.refused(["act 'gelu'"], "qjit_dense_ffn", _lib.DenseFfnArgs(dtype=b"fp16", act=b"gelu"), None)
        self.refused(["fused_ffn: args is null"], "qjit_dense_ffn", None, None)
        g = _lib.GruQuantArgs(t=4, n=1, c=8, h=8, params=b'{"input_size": 8')
        self.refused(["gru_quant params"], "qjit_gru_quant", g, None)
        self.refused(["fp_lut: in/out 'fp64'/'fp16'"], "qjit_fp_lut", b"silu", 16, b"fp64", b"fp16", None, None, None,
                     None)
        self.refused(["fused_ffn: dtype 'int8'"], "qjit_fused_ffn", 64, 64, 1, b"int8", None, None, None, None, None,
                     None)


if __name__ == "__main__":
    unittest.main()
