#!/usr/bin/env python3
"""gru_quant against a real torch.nn.GRU, on the GPU machine (python3 with
torch and numpy).

Builds a seeded nn.GRU, saves its state dict as PyTorch names it (one
.safetensors file when the safetensors package is importable, else one .npy
file per tensor), makes a smooth calibration input and a second, held-out
input of the same kind, and runs torch's float64 forward on the held-out one.
Then, for 8- and 16-bit activations: `qjit gru calibrate` on the calibration
input, `qjit gru run` on the held-out input on the GPU and with --cpu, and
compares the dequantized output with torch's (the op's targets: INT8
MSE < 1e-3, MAE < 0.05, cosine > 0.999; INT16 MSE < 1e-4, MAE < 0.015) and
the GPU's integers with the CPU reference's (equal, bit for bit).

  python3 tests/gru_vs_torch.py path/to/qjit [--c 64 --h 64 --t 50 --n 2] [--keep DIR]

Exits 0 when every target is met and the GPU equals the CPU; 1 otherwise
(a GPU run that cannot happen counts as a failure).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

TARGETS = {8: {"mse": 1e-3, "mae": 0.05, "cosine": 0.999}, 16: {"mse": 1e-4, "mae": 0.015}}


def smooth_input(rng, t, n, c):
    """Per sequence and channel a sum of three sines of random amplitude, frequency and phase."""
    steps = np.arange(t, dtype=np.float64)[:, None, None]
    x = np.zeros((t, n, c))
    for _ in range(3):
        amp = rng.uniform(0.2, 0.6, size=(1, n, c))
        freq = rng.uniform(0.05, 0.5, size=(1, n, c))
        phase = rng.uniform(0, 2 * np.pi, size=(1, n, c))
        x += amp * np.sin(freq * steps + phase)
    return x.astype(np.float32)


def save_state_dict(gru, folder):
    """The state dict under PyTorch's names: a .safetensors file, or a folder of .npy files."""
    state = {k: v.detach().float().contiguous() for k, v in gru.state_dict().items()}
    try:
        from safetensors.torch import save_file
    except ImportError:
        path = os.path.join(folder, "gru_npy")
        os.makedirs(path, exist_ok=True)
        for name, tensor in state.items():
            np.save(os.path.join(path, name + ".npy"), tensor.numpy())
        return path
    path = os.path.join(folder, "gru.safetensors")
    save_file(state, path)
    return path


def qjit(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def metrics(got, want):
    got, want = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    d = got - want
    cos = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
    return {"mse": float(np.mean(d * d)), "mae": float(np.mean(np.abs(d))), "max": float(np.max(np.abs(d))), "cosine": cos}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("qjit", help="path of the qjit binary")
    ap.add_argument("--c", type=int, default=64, help="input size")
    ap.add_argument("--h", type=int, default=64, help="hidden size")
    ap.add_argument("--t", type=int, default=50, help="time steps")
    ap.add_argument("--n", type=int, default=2, help="sequences")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", help="write the files here (kept) instead of a temporary folder")
    args = ap.parse_args()

    folder = args.keep or tempfile.mkdtemp(prefix="gru_vs_torch.")
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    gru = torch.nn.GRU(args.c, args.h)  # PyTorch's init: uniform in ±1/sqrt(H)
    weights = save_state_dict(gru, folder)
    x_cal = smooth_input(rng, args.t, args.n, args.c)
    x_eval = smooth_input(rng, args.t, args.n, args.c)
    np.save(os.path.join(folder, "x_cal.npy"), x_cal)
    np.save(os.path.join(folder, "x_eval.npy"), x_eval)
    with torch.no_grad():
        want, _ = gru.double()(torch.from_numpy(x_eval).double())
    want = want.numpy()
    np.save(os.path.join(folder, "y_torch.npy"), want.astype(np.float32))
    print(f"nn.GRU({args.c}, {args.h}) seed {args.seed}, T={args.t} N={args.n}; weights {weights}; files in {folder}")

    ok = True
    for bits in (8, 16):
        p = os.path.join(folder, f"params{bits}.json")
        q = os.path.join(folder, f"q{bits}.safetensors")
        rc, out, err = qjit(args.qjit, "gru", "calibrate", "--weights", weights, "--input",
                            os.path.join(folder, "x_cal.npy"), "--bits", str(bits), "-o", p, "--weights-out", q, "-q")
        if rc != 0:
            print(f"INT{bits}: calibrate failed (exit {rc}):\n{err}")
            ok = False
            continue
        results = {}
        for device, extra in (("gpu", []), ("cpu", ["--cpu"])):
            y = os.path.join(folder, f"y{bits}_{device}.npy")
            yf = os.path.join(folder, f"yf{bits}_{device}.npy")
            rc, out, err = qjit(args.qjit, "gru", "run", "--params", p, "--weights", q, "--input",
                                os.path.join(folder, "x_eval.npy"), "-o", y, "--float-out", yf, "-q", *extra)
            if rc != 0:
                print(f"INT{bits}: run on the {device} failed (exit {rc}):\n{err}")
                ok = False
                continue
            results[device] = (np.load(y), np.load(yf))
        if "cpu" in results:
            m = metrics(results["cpu"][1], want)
            missed = [k for k, limit in TARGETS[bits].items() if (m[k] < limit if k == "cosine" else m[k] >= limit)]
            print(f"INT{bits}: MSE {m['mse']:.3g}  MAE {m['mae']:.3g}  max {m['max']:.3g}  cosine {m['cosine']:.6f}"
                  f"  targets {TARGETS[bits]}: {'met' if not missed else 'MISSED ' + ', '.join(missed)}")
            ok &= not missed
        if "gpu" in results and "cpu" in results:
            same = np.array_equal(results["gpu"][0], results["cpu"][0])
            differ = int(np.count_nonzero(results["gpu"][0] != results["cpu"][0]))
            print(f"INT{bits}: GPU ints == CPU ints: {same}" + ("" if same else f" ({differ} differ)"))
            ok &= same
    print("all targets met, GPU equals CPU" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
