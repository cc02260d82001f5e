#!/usr/bin/env python3
"""The quantized-FFN peer that peers.py does not time: the gate and up
projections as two torch int4 'tinygemm' calls (_weight_int4pack_mm, g128)
plus silu(a) * b, the path a PyTorch user with 4-bit W1/W3 runs today.
Uses peers.py's timing helpers (CUDA graphs, weights rotated beyond L2).

  python3 tests/peer_quant_ffn.py [--peers .device/peers.py] [--json out.json]
"""
import argparse, importlib.util, json

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--peers", default=".device/peers.py", help="path of peers.py (its bench/rotating helpers)")
ap.add_argument("--json", help="also write the rows to this file")
args = ap.parse_args()
spec = importlib.util.spec_from_file_location("peers", args.peers)
peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peers)
torch, F, dev = peers.torch, peers.F, peers.dev


def int4pack(n, k):
    # torch's packer takes uint8 pairs (two nibbles per byte) on recent
    # versions and int32 values on older ones.
    w = torch.randint(0, 16, (n, k), dtype=torch.int32, device=dev)
    try:
        return torch.ops.aten._convert_weight_to_int4pack((w[:, ::2] << 4 | w[:, 1::2]).to(torch.uint8), 8)
    except Exception:
        return torch.ops.aten._convert_weight_to_int4pack(w, 8)


gs = 128
for d, h in [(4096, 11008)]:
    def make():
        return [(int4pack(h, d), torch.randn(d // gs, h, 2, device=dev, dtype=torch.bfloat16) * 0.01) for _ in range(2)]
    nxt = peers.rotating(make, d * h)  # two matrices of d·h/2 bytes
    for m in (1, 8):
        x = torch.randn(m, d, device=dev, dtype=torch.bfloat16)
        def f():
            (w1, sz1), (w3, sz3) = nxt()
            a = torch.ops.aten._weight_int4pack_mm(x, w1, gs, sz1)
            b = torch.ops.aten._weight_int4pack_mm(x, w3, gs, sz3)
            return F.silu(a) * b
        peers.row("fused_ffn", f"torch 2x tinygemm int4 g{gs} + silu*mul d={d} h={h} M={m}", peers.bench(f),
                  d * h + 2 * (d // gs) * h * 4)
for r in peers.ROWS:
    print(f"{r['case']:<72} {r['us']:>9}")
if args.json:
    with open(args.json, "w") as f:
        json.dump({"rows": peers.ROWS}, f, indent=1)
