"""qjit.tune and qjit.import_shipped without a GPU (CUDA_VISIBLE_DEVICES empty,
so on the GPU machine too): the command's GPU-free part runs and the wrappers
raise QjitError with status "no_device"."""
import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qjit  # noqa: E402
from support import CliTest  # noqa: E402


class NoGpu(CliTest):
    def env(self, **extra):
        return mock.patch.dict(os.environ, dict(CUDA_VISIBLE_DEVICES="", **extra))

    def test_tune_says_no_device(self):
        with self.env(), self.assertRaises(qjit.QjitError) as cm:
            qjit.tune("fused_ffn", {"d": 256, "h": 64}, m=1, cache=self.file("k.db"))
        self.assertEqual(cm.exception.status, "no_device")
        self.assertIn("No usable GPU", cm.exception.stdout)

    def test_import_shipped_says_no_device(self):
        with open(self.file("h200.jsonl"), "w"):
            pass
        with self.env(QJIT_SHIPPED=self.tmp.name), self.assertRaises(qjit.QjitError) as cm:
            qjit.import_shipped(cache=self.file("k.db"))
        self.assertEqual(cm.exception.status, "no_device")
        self.assertIn("0 shipped record(s) wait in " + self.tmp.name, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
