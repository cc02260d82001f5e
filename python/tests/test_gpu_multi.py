"""qjit on two GPUs in one process (DESIGN.md "Runtime rules"): the GPU
machine with two devices, tests/gpu_multi.sh. Skipped without torch or with
fewer than two CUDA devices.

- A fresh process that uses cuda:1 only (torch.cuda.set_device(1)): every
  op's output is right and on cuda:1, and device 0's primary context is never
  created, so nothing ran there (checked through the driver,
  cuDevicePrimaryCtxGetState; when torch itself made it first, that part is
  reported as not checked).
- Interleaved devices, by torch.cuda.set_device and by tensors on a device
  that is not the current one (qjit switches for the call and back): outputs
  right, on the tensors' device, the current device unchanged.
- A side stream of device 1 is the stream used.
- A kernel tuned on device 0 (`qjit tune`, which runs on device 0) serves
  device 1 of the same kind: a fresh process with QJIT_REQUIRE_TUNED=1 loads
  it into device 1's context (QJIT_LOG=1 says so) and its result is right.

Tolerances are those of test_gpu.py for the same ops: fused_ffn 1e-2 and
w8a8_gemm 3e-2 of max |reference| (fp16 output; x's quantization error
dominates w8a8's), qconv2d fp16 1e-2.
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import qjit  # noqa: E402

try:
    import torch
    import torch.nn.functional as F

    DEVICES = torch.cuda.device_count() if torch.cuda.is_available() else 0
except ImportError:
    torch = None
    DEVICES = 0


def primary_active(ordinal):
    """Whether device `ordinal`'s primary context exists (the driver's cuDevicePrimaryCtxGetState)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), ordinal) == 0
    assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0
    return bool(active.value)


def run_ops(device, seed=0):
    """fused_ffn (dense), W8A8Linear and QConv2d on `device`: [(name, y, reference, tolerance)], the
    references computed by torch on the same device from the weights the kernels use."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen).to(device)  # noqa: E731
    out = []
    d, h = 512, 1024
    x, w1, w3 = rand(2, d).half(), (rand(h, d) / d ** 0.5).half(), (rand(h, d) / d ** 0.5).half()
    ref = F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T)
    out.append(("fused_ffn", qjit.fused_ffn(x, w1, w3), ref, 1e-2))
    lin = torch.nn.Linear(256, 384).to(device).half()
    q = qjit.nn.W8A8Linear.from_float(lin, block=64)
    x = rand(3, 256).half()
    out.append(("W8A8Linear", q(x), x.float() @ q.dequantized_weight().T + lin.bias.float(), 3e-2))
    conv = torch.nn.Conv2d(64, 32, 3, padding=1).to(device)
    qc = qjit.nn.QConv2d.from_float(conv, bits=4, block=32)
    x = rand(1, 64, 12, 12).half()
    ref = F.conv2d(x.float(), qc.dequantized_weight(), qc.bias, padding=1)
    out.append(("QConv2d", qc(x), ref, 1e-2))
    return out


def errors(results, device):
    """[(name, device of y, max |y − ref| / max |ref|, tolerance)] after synchronizing `device`."""
    torch.cuda.synchronize(device)
    rows = []
    for name, y, ref, tol in results:
        err = (y.double() - ref.double()).abs().max().item() / max(ref.double().abs().max().item(), 1e-30)
        rows.append((name, str(y.device), err, tol))
    return rows


def only_device_1():
    """A fresh process's work on cuda:1 only; prints one JSON line."""
    torch.cuda.set_device(1)
    dev = torch.device("cuda", 1)
    torch.empty(1, device=dev)  # torch's own set-up on device 1, before the first look at device 0
    before = primary_active(0)
    rows = errors(run_ops(dev), dev)
    print(json.dumps({"device0_active_before": before, "device0_active_after": primary_active(0), "rows": rows,
                      "current_device": torch.cuda.current_device()}))


def tuned_on_1(d, h):
    """One fused_ffn call on cuda:1 (the parent sets QJIT_REQUIRE_TUNED=1); prints its error as JSON."""
    torch.cuda.set_device(1)
    gen = torch.Generator().manual_seed(1)
    x, w1, w3 = (torch.randn(*s, generator=gen).to("cuda:1").half() for s in ((2, d), (h, d), (h, d)))
    ref = F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T)
    rows = errors([("fused_ffn", qjit.fused_ffn(x, w1, w3), ref, 1e-2)], torch.device("cuda", 1))
    print(json.dumps({"rows": rows}))


def child(mode, *args, env=None):
    """Runs this file in a fresh python3 with `mode`; returns (its JSON line, its stderr)."""
    e = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, os.path.abspath(__file__), mode] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=e)
    if p.returncode:
        raise AssertionError("%s exited %d:\n%s\n%s" % (mode, p.returncode, p.stdout, p.stderr))
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@unittest.skipUnless(DEVICES >= 2, "needs torch and 2 CUDA devices (%d visible)" % DEVICES)
class TwoGpus(unittest.TestCase):
    def check(self, rows, device):
        for name, where, err, tol in rows:
            self.assertEqual(where, str(device), name)
            self.assertLessEqual(err, tol, "%s on %s: max error %.3g of max |ref|" % (name, device, err))

    def test_a_process_on_device_1_never_touches_device_0(self):
        out, _ = child("--only-device-1")
        self.check(out["rows"], "cuda:1")
        self.assertEqual(out["current_device"], 1)
        if out["device0_active_before"]:
            self.skipTest("torch created device 0's context before qjit ran: 'nothing on device 0' not checked")
        self.assertFalse(out["device0_active_after"], "device 0's primary context was created: work ran there")

    def test_interleaved_by_set_device(self):
        saved = torch.cuda.current_device()
        try:
            for i in (1, 0, 1, 1, 0):
                torch.cuda.set_device(i)
                self.check(errors(run_ops(torch.device("cuda", i), seed=i), i), "cuda:%d" % i)
                self.assertEqual(torch.cuda.current_device(), i)
        finally:
            torch.cuda.set_device(saved)

    def test_tensors_off_the_current_device(self):
        saved = torch.cuda.current_device()
        try:
            for current, on in ((0, 1), (1, 0), (0, 1)):
                torch.cuda.set_device(current)
                self.check(errors(run_ops(torch.device("cuda", on), seed=on), on), "cuda:%d" % on)
                self.assertEqual(torch.cuda.current_device(), current, "the call changed the current device")
        finally:
            torch.cuda.set_device(saved)

    def test_a_side_stream_of_device_1(self):
        dev = torch.device("cuda", 1)
        gen = torch.Generator().manual_seed(3)
        d, h = 512, 1024
        x, w1, w3 = (torch.randn(*s, generator=gen).to(dev).half() for s in ((4, d), (h, d), (h, d)))
        y = torch.full((4, h), 7.0, device=dev, dtype=torch.float16)
        ref = F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T)
        s = torch.cuda.Stream(device=dev)
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.device(dev), torch.cuda.stream(s):
            qjit.fused_ffn(x, w1, w3, out=y)
        s.synchronize()
        self.check(errors([("fused_ffn on a side stream", y, ref, 1e-2)], dev), dev)

    def test_a_kernel_tuned_on_device_0_serves_device_1(self):
        names = [torch.cuda.get_device_name(i) for i in (0, 1)]
        if names[0] != names[1]:
            self.skipTest("devices 0 and 1 differ (%s): each kind has its own rows" % ", ".join(names))
        d, h = 512, 768
        with tempfile.TemporaryDirectory() as tmp:
            db = os.path.join(tmp, "tuned.db")
            report = qjit.tune("fused_ffn", "d=%d,h=%d" % (d, h), m=2, budget="6", cache=db)  # on device 0
            self.assertTrue(report, "qjit tune reported nothing")
            out, err = child("--tuned-on-1", d, h,
                             env={"QJIT_CACHE": db, "QJIT_REQUIRE_TUNED": "1", "QJIT_LOG": "1"})
        self.check(out["rows"], "cuda:1")
        self.assertIn("loaded the tuned kernel", err)
        self.assertIn(names[1], err)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--only-device-1":
        only_device_1()
    elif len(sys.argv) > 1 and sys.argv[1] == "--tuned-on-1":
        tuned_on_1(int(sys.argv[2]), int(sys.argv[3]))
    else:
        unittest.main()
