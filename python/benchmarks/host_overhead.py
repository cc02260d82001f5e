"""Host time of qjit's Python layer per call of each op, without the C call.

Times everything an op does before the C library takes over: the argument
checks, the output allocation (or the check of `out=`), the struct or
argument marshalling. qjit.ops._launch, the one place that calls the C
library, is replaced by a no-op, so no GPU is needed; on the GPU machine the
full cost of a cache hit is test_gpu.measure_launch_overhead (tests/gpu_python.sh).

  python3 python/benchmarks/host_overhead.py            # stand-in tensors (python/tests/support.py)
  python3 python/benchmarks/host_overhead.py --torch    # CPU torch tensors posing as cuda:0

--torch makes CPU tensors answer as CUDA tensors on device 0 (is_cuda,
get_device() and .device are patched on torch.Tensor in this process only,
the first two with torch's own is_cpu and storage_offset(), which cost what
they stand for), and outputs are allocated by qjit's own code, on the CPU here. The stand-ins' methods
are Python code whose costs are not torch's (is_contiguous() loops over the
dimensions, numel() multiplies them): --torch is the model of a real call,
the stand-ins only a check that every case takes the fast path.
With --torch it also times the qjit.nn modules' forward at the same shapes and
wq_gemm called eagerly through its custom op, torch.ops.qjit.wq_gemm (what
torch's dispatcher adds: why the modules call the custom ops only while
torch.compile traces). Prints one line per case: µs of the thread's CPU time
per call, the best and the median of 7 batches (CPU time and the best batch
are the steadier on a shared machine), and which path ran. Timing only: it
asserts nothing.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import qjit  # noqa: E402
from qjit import ops  # noqa: E402


def standin_tensors():
    from support import T

    def alloc(shape, dtype, like):
        from qjit._check import TORCH_NAMES

        return T(TORCH_NAMES[dtype][len("torch."):], *shape)

    return T, alloc


def torch_tensors():
    import torch

    cuda0 = torch.device("cuda", 0)
    base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
    torch.Tensor.is_cuda = base.is_cpu  # torch's own attribute, True here: what is_cuda costs
    torch.Tensor.get_device = base.storage_offset  # torch's own method, 0 here: what get_device() costs
    torch.Tensor.device = property(lambda self: cuda0)  # read by the checked path only
    names = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int32": torch.int32,
             "uint8": torch.uint8, "int8": torch.int8}

    def T(dtype, *shape):
        return torch.empty(shape, dtype=names[dtype])  # uninitialised: pages are never touched

    return T, None  # qjit's own allocation: like.new_empty(), here on the CPU


def cases(T):
    """(name, call) of each op at the shapes of the GPU tests and issues (d=4096, h=11008, M=1)."""
    d, h = 4096, 11008
    x, w1, w3, y = T("float16", 1, d), T("float16", h, d), T("float16", h, d), T("float16", 1, h)
    qw = T("int32", d * h // 8)
    sc, zr = T("float16", d // 128, h), T("uint8", d // 128, h)
    xq, wq, ws, wo, wsum = T("float16", 1, d), T("int8", h, d), T("float32", d // 128, h), T("float32", d // 128, h), \
        T("int32", d // 128, h)
    awq_w, awq_z, awq_s = T("int32", d, h // 8), T("int32", d // 128, h // 8), T("float16", d // 128, h)
    awq_y = T("float16", d, h)
    lut_x, lut_y = T("float16", 1, h), T("float16", 1, h)
    gx, gh, gW, gR, gb, gy = T("int32", 1, 1, 64), T("int32", 1, 64), T("int8", 192, 64), T("int8", 192, 64), \
        T("int32", 192), T("int32", 1, 1, 64)
    params = '{"input_size": 64}'
    cx, cw, cs, co, cy = T("float16", 1, 64, 56, 56), T("uint8", 64, 3, 3, 32), T("float32", 64, 2), \
        T("float32", 64, 2), T("float16", 1, 64, 56, 56)
    return [
        ("fused_ffn dense, out=", lambda: qjit.fused_ffn(x, w1, w3, out=y)),
        ("fused_ffn dense, allocating", lambda: qjit.fused_ffn(x, w1, w3)),
        ("fused_ffn quantized, out=", lambda: qjit.fused_ffn(x, qw, qw, scales1=sc, zeros1=zr, scales3=sc,
                                                             zeros3=zr, out=y)),
        ("wq_gemm, out=", lambda: qjit.wq_gemm(x, qw, sc, zr, out=y)),
        ("wq_gemm, allocating", lambda: qjit.wq_gemm(x, qw, sc, zr)),
        ("awq_dequant, out=", lambda: qjit.awq_dequant(awq_w, awq_z, awq_s, out=awq_y)),
        ("fp_lut, out=", lambda: qjit.fp_lut(lut_x, "silu", out=lut_y)),
        ("gru_quant, out=", lambda: qjit.gru_quant(gx, gh, gW, gR, gb, gb, params, out=gy)),
        ("w8a8_gemm, out=", lambda: qjit.w8a8_gemm(xq, wq, ws, wo, wsum, out=y)),
        ("qconv2d, out=", lambda: qjit.qconv2d(cx, cw, cs, co, padding=1, out=cy)),
    ]


def torch_cases(T):
    """--torch only: the same layer shapes through a qjit.nn module's forward, and wq_gemm through its custom op
    called eagerly (torch.ops.qjit.wq_gemm: what the dispatcher adds, why the modules call it only when compiling)."""
    import torch
    import qjit.nn as qnn

    d, h = 4096, 11008
    x = T("float16", 1, d)
    lin, w8 = qnn.QuantLinear(d, h), qnn.W8A8Linear(d, h)
    ffn = qnn.FusedFFN.from_quant(qnn.QuantLinear(d, h), qnn.QuantLinear(d, h))
    conv, cx = qnn.QConv2d(64, 64, 3, padding=1), T("float16", 1, 64, 56, 56)
    return [
        ("torch.ops.qjit.wq_gemm", lambda: torch.ops.qjit.wq_gemm(x, lin.qweight, lin.scales, lin.zeros)),
        ("QuantLinear forward", lambda: lin(x)),
        ("FusedFFN forward, quantized", lambda: ffn(x)),
        ("W8A8Linear forward", lambda: w8(x)),
        ("QConv2d forward", lambda: conv(cx)),
    ]


def per_call_us(f, batch=2000, batches=7):
    """(best, median) µs of thread CPU time per call of f over `batches` batches of `batch` calls."""
    f()
    times = []
    for _ in range(batches):
        t0 = time.thread_time()
        for _ in range(batch):
            f()
        times.append((time.thread_time() - t0) / batch * 1e6)
    times.sort()
    return times[0], times[batches // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torch", action="store_true", help="CPU torch tensors posing as cuda:0 instead of stand-ins")
    p.add_argument("--batch", type=int, default=2000, help="calls per batch (default 2000)")
    a = p.parse_args()
    T, alloc = torch_tensors() if a.torch else standin_tensors()
    launches = []
    ops._launch = lambda *args: launches.append(args[1])
    if alloc is not None:
        ops._empty = alloc
    print("# qjit Python layer per call, C call replaced by a no-op (%s); best and median of 7 batches of %d"
          % ("CPU torch tensors as cuda:0" if a.torch else "stand-in tensors", a.batch))
    checked, spied = [], []  # the ops whose checked path ran (ops.py): a case meant for the fast path must not be there
    for op in ("wq_gemm", "awq_dequant", "fused_ffn", "fp_lut", "gru_quant", "w8a8_gemm", "qconv2d"):
        original = getattr(ops, "_%s_checked" % op, None)
        if original is not None:  # a package without the fast paths has none
            spied.append(op)
            setattr(ops, "_%s_checked" % op, lambda *args, _f=original, _op=op, **kw: (checked.append(_op),
                                                                                       _f(*args, **kw))[1])
    for name, f in cases(T) + (torch_cases(T) if a.torch else []):
        f()  # the first call with a dtype takes the checked path
        launches.clear()
        checked.clear()
        f()
        if len(launches) != 1:
            raise SystemExit("%s launched %d times" % (name, len(launches)))
        path = "checked path" if checked else "fast path" if spied else "one path"
        print("%-30s %7.2f us best %7.2f us median  (%s)" % ((name,) + per_call_us(f, a.batch) + (path,)), flush=True)


if __name__ == "__main__":
    main()
