#!/usr/bin/env bash
# qconv2d on the GPU machine: its [gpu] tests, a tune and bench of the
# issue's shapes (peers.py's ResNet-like 3×3 convolutions at batch 1 and 8;
# int4, block 32, fp16, pad 1; NCHW and NHWC), cuDNN through peers.py
# (F.conv2d on fp16 weights, NCHW and channels_last), and a table last with
# the best direct (seed-structured) kernel of each tune. Logs and JSON go to $OUT.
#   usage (repo root on the GPU machine): bash tests/gpu_qconv2d.sh [tests|bench|all]
#   EXHAUSTIVE=0 tunes by the staged search instead of timing every candidate in full.
# Expects the install tree in .dist (with --component tests) and peers.py in .device/peers.py.
set -u
NAME=qconv2d
source "$(dirname "$0")/gpu_op_common.sh"
PART=${1:-all}

if [ "$PART" = all ] || [ "$PART" = tests ]; then
  run_tests "qconv2d*"
fi
[ "$PART" = tests ] && exit 0

CASES=("1 256 56 256" "8 128 28 128" "1 512 14 512" "8 512 14 512")
i=0
for c in "${CASES[@]}"; do
  set -- $c
  for layout in nchw nhwc; do
    i=$((i+1))
    shape="n=$1,ci=$2,h=$3,w=$3,co=$4,kh=3,kw=3,pad_h=1,pad_w=1,bits=4,block=32,x=fp16,layout=$layout"
    # --exhaustive: the table's direct column needs that family timed in full (EXHAUSTIVE=0: the
    # staged search, quicker; the direct column then reads nan).
    ex=(--exhaustive); [ "${EXHAUSTIVE:-1}" = 0 ] && ex=()
    tune_bench qconv2d "$shape" "$i" "$c $layout" "${ex[@]}"
  done
done
run_peers qconv2d 10

python3 - "$OUT" "${CASES[@]}" <<'PY'
import json, os, sys
out, cases = sys.argv[1], sys.argv[2:]
peers = {}
if os.path.exists(f"{out}/peers.json"):
    for r in json.load(open(f"{out}/peers.json"))["rows"]:
        peers[r["case"]] = r["us"]
print(f"\n{'N':>2} {'C':>4} {'HW':>3} {'Co':>4} {'layout':<6} {'qjit us':>9} {'direct us':>10} {'x direct':>8} "
      f"{'cuDNN best':>10} {'x cuDNN':>7}  config")
i = 0
for c in cases:
    nb, ci, hw, co = c.split()
    cudnn = [peers.get(f"cuDNN conv2d fp16 {f} N={nb} C={ci} HW={hw} Co={co} k=3") for f in ("NCHW", "NHWC")]
    cudnn = min((v for v in cudnn if v), default=float("nan"))
    for layout in ("nchw", "nhwc"):
        i += 1
        try:
            q = json.load(open(f"{out}/bench_{i}.json"))[0]["rows"][0]
            show = json.load(open(f"{out}/show_{i}.json"))[0]
        except Exception:
            print(f"{nb:>2} {ci:>4} {hw:>3} {co:>4} {layout:<6} (no bench)"); continue
        direct = min((t["median_us"] for t in show["trials"] if t["status"] == "ok" and not t.get("screened")
                      and isinstance(t["config"], dict) and t["config"].get("family") == "direct"), default=float("nan"))
        us = q["median_us"]
        cfg = q.get("config")
        cfg = cfg if isinstance(cfg, str) else json.dumps(cfg, separators=(",", ":"))
        print(f"{nb:>2} {ci:>4} {hw:>3} {co:>4} {layout:<6} {us:>9.1f} {direct:>10.1f} {direct / us:>8.1f} "
              f"{cudnn:>10.1f} {cudnn / us:>7.2f}  {cfg}")
PY
