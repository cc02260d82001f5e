#!/usr/bin/env bash
# w8a8_gemm on the GPU machine: its [gpu] tests (int8 and format=e4m3), a
# tune and bench of the issue's shapes (K = 4096, N = 11008, block 128; the
# seed's offset form, the symmetric LLM form, and FP8 e4m3 at M = 4096),
# PyTorch's peers (peers.py w8a8_gemm: torch._int_mm, cuBLAS fp16, FP8
# _scaled_mm), and a table last. Logs and JSON go to $OUT.
#   usage (repo root on the GPU machine): bash tests/gpu_w8a8.sh [tests|bench|all]
#   TESTS="catch2 test spec" overrides which tests run (default: the w8a8_gemm ones);
#   CASES="offset 1;symmetric 4096;e4m3 4096" the (form, M) cases tuned (form e4m3: format=e4m3);
#   LARGE_ONLY='{"bk":128}' restricts the tunes of M >= 1024 to the candidates holding those keys
#   (qjit tune --only): LARGE_ONLY='{"family":"wgmma"}' tunes only the Hopper wgmma family there, int8
#   and e4m3 alike (compute capability 9.0), e.g. the FP8 kernel alone:
#     CASES="e4m3 4096" LARGE_ONLY='{"family":"wgmma"}' bash tests/gpu_w8a8.sh bench
# Expects the install tree in .dist (with --component tests) and peers.py in .device/peers.py.
set -u
NAME=w8a8
source "$(dirname "$0")/gpu_op_common.sh"
PART=${1:-all}

if [ "$PART" = all ] || [ "$PART" = tests ]; then
  run_tests ${TESTS:-"w8a8_gemm*"}
fi
[ "$PART" = tests ] && exit 0

IFS=';' read -r -a CASES <<<"${CASES:-offset 1;offset 16;symmetric 16;offset 128;offset 1024;offset 4096;symmetric 4096;e4m3 16;e4m3 4096}"
i=0
for c in "${CASES[@]}"; do
  i=$((i+1)); set -- $c
  shape="k=4096,n=11008,block=128,m=$2,quant_a=$1,quant_w=$1"
  [ "$1" = e4m3 ] && shape="k=4096,n=11008,block=128,m=$2,format=e4m3"
  only=()
  [ "$2" -ge 1024 ] && [ -n "${LARGE_ONLY:-}" ] && only=(--only "$LARGE_ONLY")
  tune_bench w8a8_gemm "$shape" "$i" "$c" "${only[@]}"
done
run_peers w8a8_gemm 16

GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
python3 - "$OUT" "$GPU_NAME" "${CASES[@]}" <<'PY'
import json, os, sys
out, gpu, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
# Dense FP8 tensor peak, TFLOPS: NVIDIA's H100 and H200 datasheets give FP8 Tensor Core 3,958 TFLOPS for the SXM
# parts and 3,026 for H100 PCIe, both "with sparsity"; dense is half. (989 TFLOPS is their dense FP16/BF16.)
fp8_peak = 1513.0 if "PCIe" in gpu else 1979.0
peers = {}
if os.path.exists(f"{out}/peers.json"):
    for r in json.load(open(f"{out}/peers.json"))["rows"]:
        peers[r["case"]] = r["us"]
def peer(prefix):
    return next((v for k, v in peers.items() if k.startswith(prefix)), float("nan"))
print(f"\n{'form':<9} {'M':>5} {'qjit us':>9} {'TOP/s':>7} {'floor %':>7} {'cublas fp16':>11} {'x':>5} {'int8 no scales':>14} "
      f"{'x':>5} {'torch fp16':>10} {'_int_mm':>8} {'x':>5}  config")
for i, c in enumerate(cases, 1):
    form, m = c.split()
    try:
        b = json.load(open(f"{out}/bench_{i}.json"))[0]
    except Exception:
        print(f"{form:<9} {m:>5} (no bench)"); continue
    rows = {r.get("name", "qjit"): r for r in b["rows"]}
    q = b["rows"][0]
    us = q["median_us"]
    base = lambda name: next((r["median_us"] for r in b["rows"] if r.get("name") == name), float("nan"))
    f16, i8 = base("cublas_fp16"), base("cublas_int8_no_scales")
    tf16 = peer(f"cuBLAS fp16 M={m} K=4096 N=11008")
    imm = peer(f"torch._int_mm (per-tensor, no scales) M={m} K=4096 N=11008")
    tops = 2 * int(m) * 4096 * 11008 / us / 1e6
    floor_pct = 100 * b.get("floor_us", float("nan")) / us  # the op's bytes at the copy bandwidth (small M's target)
    if form == "e4m3":
        block = peer(f"torch._scaled_mm fp8 e4m3 block-wise 1x128/128x128 M={m} K=4096 N=11008")
        print(f"{form:<9} {m:>5} {us:>9.1f} {tops:>7.0f} {floor_pct:>7.0f} {f16:>11.1f} {f16 / us:>5.2f}  "
              f"{100 * tops / fp8_peak:.0f}% of {gpu}'s dense FP8 peak {fp8_peak:.0f} TFLOPS (target 60%); "
              f"torch._scaled_mm row-wise {peer(f'torch._scaled_mm fp8 e4m3 row-wise M={m} K=4096 N=11008'):.1f} us, "
              f"block-wise {block:.1f} us ({block / us:.2f}x)  {json.dumps(q.get('config'), separators=(',', ':'))}")
        continue
    cfg = q.get("config")
    cfg = cfg if isinstance(cfg, str) else json.dumps(cfg, separators=(",", ":"))
    print(f"{form:<9} {m:>5} {us:>9.1f} {tops:>7.0f} {floor_pct:>7.0f} {f16:>11.1f} {f16 / us:>5.2f} {i8:>14.1f} "
          f"{i8 / us:>5.2f} {tf16:>10.1f} {imm:>8.1f} {imm / us:>5.2f}  {cfg}")
PY
