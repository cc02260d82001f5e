#!/usr/bin/env bash
# One GPU-machine session: builds nothing. Runs the [gpu] tests, tunes and
# benchmarks the issue's shapes, the launch, read and timeline probes and the PyTorch peers, and
# prints a short table last. Logs and JSON go to $OUT.
#   usage (repo root on the GPU machine): bash tests/gpu_session.sh [PART]
#   PART: all (default), tests (only the [gpu] tests), ffn or lut (tests
#   skipped; fused_ffn or fp_lut tuning, benches and peers only), ffn+tests,
#   awq+tests (the tests, then awq_dequant tuning, benches and peers),
#   wq, wq+tests (wq_gemm tuning, benches and peers; with or without the tests),
#   qffn, qffn+tests (fused_ffn on 4-bit weights and the W2 + residual half,
#   with peers.py fused_ffn and tests/peer_quant_ffn.py)
#   NO_PEERS=1 skips the PyTorch peers (a quick look at qjit and cuBLAS alone).
#   NCU="op shape args;..." in the environment adds an Nsight Compute profile
#   of each listed cached kernel after the benches; ONLY="op shape args;..."
#   tunes and benches those shapes instead of the part's.
#   CACHE_IN=FILE starts from that kernel cache (one carried from an earlier
#   call); TUNE=0 benches the cached winners without tuning; PEER_OPS="op ..."
#   replaces the part's peers.py ops. The cache comes back as $OUT/kernels.db
#   (unless too big for the device tool: large-M tunes grow it past that).
#   PROBES=0 skips the read and timeline probes.
# Expects: the install tree in .dist (cmake --install build --prefix .dist, and again
# with --component tests for qjit_tests and the probes) and
# peers.py copied to .device/peers.py (../shared does not travel).
set -u
DIST=${DIST:-.dist}
# Logs go to a work folder and come back as one tarball (the device tool
# returns at most 8 files).
FINAL=${OUT:-/tmp/qjit_out}
OUT=/tmp/qjit_gpu/out
rm -rf /tmp/qjit_gpu
mkdir -p "$OUT" "$FINAL"
# save_logs after each step too: a call stopped at its time limit still
# returns what finished (written aside, then renamed over the last tarball).
save_logs() {
  tar czf "$FINAL/logs.tgz.part" -C /tmp/qjit_gpu out dump 2>/dev/null; mv -f "$FINAL/logs.tgz.part" "$FINAL/logs.tgz"
  [ -f /tmp/qjit_gpu/kernels.db ] && cp /tmp/qjit_gpu/kernels.db "$FINAL/kernels.db"
}
trap save_logs EXIT
export QJIT_CACHE=/tmp/qjit_gpu/kernels.db QJIT_DUMP_DIR=/tmp/qjit_gpu/dump
# (a carried file may arrive read-only; SQLite must write it)
[ -n "${CACHE_IN:-}" ] && cp "$CACHE_IN" "$QJIT_CACHE" && chmod u+w "$QJIT_CACHE"
Q="$DIST/bin/qjit"
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader)"
"$Q" doctor | tee "$OUT/doctor.txt"

PART=${1:-all}
case "$PART" in all|tests|*+tests) RUN_TESTS=1 ;; *) RUN_TESTS=0 ;; esac
if [ "$RUN_TESTS" = 1 ]; then
  echo "== GPU tests"
  ( time "$DIST/bin/qjit_tests" "[gpu]" ) >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests exit $?"; grep -E "FAILED|failed|passed" "$OUT/gpu_tests.log" | head -20; tail -4 "$OUT/gpu_tests.log"
  # A primary-context reset ends every module and allocation of its process: in a process of its own.
  "$DIST/bin/qjit_tests" "[gpu_reset]" >"$OUT/gpu_reset.log" 2>&1
  echo "context reset test exit $?"; grep -E "FAILED|failed|passed" "$OUT/gpu_reset.log" | head -5
  save_logs
fi
[ "$PART" = tests ] && exit 0

echo "== tune + bench"
SHAPES=("fused_ffn d=4096,h=11008 --m 1-8" "fused_ffn d=4096,h=12288 --m 1,8" "fused_ffn d=2048,h=5632 --m 1,8"
        "fused_ffn d=4096,h=11008 --dtype bf16 --m 1" "fused_ffn d=4096,h=11008 --dtype fp32 --m 1"
        "fused_ffn d=4096,h=11008 --dtype mixed --m 1" "fused_ffn d=4096,h=11008,act=silu_lut --m 1,8")
LUTS=()
for fn in silu gelu exp; do LUTS+=("fp_lut n=134217728,fn=$fn"); done
AWQS=("awq_dequant k=4096,n=11008,g=128" "awq_dequant k=11008,n=4096,g=128"
      "awq_dequant k=4096,n=11008,g=128,layout=gptq")
WQS=("wq_gemm k=4096,n=11008 --m 1,4,16,64,256" "wq_gemm k=11008,n=4096 --m 1,16,64,256"
     "wq_gemm k=4096,n=4096 --m 1,16" "wq_gemm k=4096,n=11008,bits=8 --m 1" "wq_gemm k=11008,n=4096,bits=8 --m 1")
QFFNS=("fused_ffn d=4096,h=11008,weights=native --m 1,8" "fused_ffn d=4096,h=11008,weights=native,bits=8 --m 1"
       "wq_gemm k=11008,n=4096,residual=yes --m 1,8")
PEERS="fused_ffn fp_lut awq_dequant wq_gemm"
case "$PART" in
  wq|wq+tests) SHAPES=("${WQS[@]}"); PEERS=wq_gemm ;;
  qffn|qffn+tests) SHAPES=("${QFFNS[@]}"); PEERS=fused_ffn ;;
  awq+tests) SHAPES=("${AWQS[@]}"); PEERS=awq_dequant ;;
  ffn) PEERS=fused_ffn ;;
  ffn+tests) PEERS=fused_ffn ;;
  lut) SHAPES=(); PEERS=fp_lut ;;
esac
case "$PART" in ffn|ffn+tests|awq+tests|wq|wq+tests|qffn|qffn+tests) ;; *) SHAPES+=("${LUTS[@]}") ;; esac
[ "$PART" = all ] && SHAPES+=("${AWQS[@]}" "${WQS[@]}" "${QFFNS[@]}")
[ -n "${PEER_OPS:-}" ] && PEERS=$PEER_OPS
# ONLY="op shape args;op shape args" replaces the part's shapes (a quick look at a few).
[ -n "${ONLY:-}" ] && IFS=';' read -ra SHAPES <<<"$ONLY"
i=0
for s in "${SHAPES[@]}"; do
  i=$((i+1))
  op=${s%% *}; shape=${s#* }
  if [ "${TUNE:-1}" != 0 ]; then
    /usr/bin/time -f "tune wall %e s" "$Q" tune --op $op --shape $shape --json >"$OUT/tune_$i.json" 2>>"$OUT/tune.log"
    tail -1 "$OUT/tune.log"
  fi
  "$Q" bench --op $op --shape $shape --json >"$OUT/bench_$i.json" 2>>"$OUT/bench.log" || echo "bench $s failed"
  # One line per bench as it lands (the call's output keeps it if the call is cut short).
  python3 -c 'import json, sys
for b in json.load(open(sys.argv[1])):
    q = b["rows"][0]
    base = b["rows"][1] if len(b["rows"]) > 1 else None  # the first baseline, as in the table at the end
    ratio = ", %.2fx %s" % (base["median_us"] / q["median_us"], base["name"]) if base else ""
    print("  %s: %.2f us, %.1f%% of floor%s" % (b["spec"][:60], q["median_us"], q["pct_of_floor"], ratio))' \
    "$OUT/bench_$i.json" 2>/dev/null
  save_logs
done
"$Q" list > "$OUT/list.txt"
for s in "${SHAPES[@]}"; do op=${s%% *}; shape=${s#* }; "$Q" show --op $op --shape $shape; done >"$OUT/show.txt" 2>&1

if [ "$PART" = all ] || [ "$PART" = ffn ] || [ "$PART" = ffn+tests ]; then
  echo "== launch probe (warm cache, new processes)"
  for k in 1 2 3; do "$DIST/bin/qjit_launch_probe" 4096 11008 1 fp16; done | tee "$OUT/probe.jsonl"
fi

case "$PART${PROBES:-1}" in
  all1|wq1|wq+tests1|qffn1|qffn+tests1)
    echo "== read probe (the ceiling for weight-streaming kernels in this launch pattern)"
    "$DIST/bin/qjit_read_probe" 8.9 23.6 47 | tee "$OUT/read_probe.jsonl" | grep fit
    # Per-block timelines of the cached wq_gemm winners of the mma family at
    # M <= 16: entry, past the wait, chunks done, exit (tests/probe/timeline_probe.cpp).
    echo "== timeline probe (cached wq_gemm mma-family winners, M <= 16; last launch of each chain)"
    "$Q" list --json 2>/dev/null | python3 -c '
import json, sys
for r in json.load(sys.stdin):
    s = r["spec"]
    if r["op"] != "wq_gemm" or s.get("m", 0) > 16 or "family" in r["config"]:
        continue
    print(",".join(f"{k}={v}" for k, v in sorted(s.items()) if k != "op") + "|" + json.dumps(r["config"]))
' | while IFS='|' read -r shape cfg; do "$DIST/bin/qjit_timeline_probe" "$shape" "$cfg"; done >"$OUT/timeline.jsonl" 2>&1
    grep -E '"shape"|"run": 7' "$OUT/timeline.jsonl" | cut -c1-220 ;;
esac

# NCU="op shape args;op shape args": Nsight Compute on one launch of each
# cached kernel (clocks left alone, as the device notes ask).
if [ -n "${NCU:-}" ]; then
  IFS=';' read -ra PROFILES <<<"$NCU"
  i=0
  for s in "${PROFILES[@]}"; do
    i=$((i+1)); op=${s%% *}; shape=${s#* }
    echo "== ncu $s"
    ncu --clock-control none -k regex:qjit_ --launch-skip 3 --launch-count 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
        "$Q" bench --op $op --shape $shape >"$OUT/ncu_$i.txt" 2>&1 || echo "ncu failed"
    # The SASS of the profiled launch with its executed-instruction counts, for reading the inner loop.
    ncu --clock-control none -k regex:qjit_ --launch-skip 3 --launch-count 1 --section SourceCounters \
        --page source --print-source sass --csv "$Q" bench --op $op --shape $shape >"$OUT/ncu_sass_$i.csv" 2>&1 ||
      echo "ncu sass page failed"
    grep -E "Duration|Memory Throughput|DRAM Throughput|Issue Slots Busy|Executed Ipc A|No Eligible|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued" "$OUT/ncu_$i.txt" | head -16
  done
fi

if [ "${NO_PEERS:-0}" != 1 ]; then
echo "== PyTorch peers"
PYTHONUNBUFFERED=1 python3 .device/peers.py $PEERS --json "$OUT/peers.json" >"$OUT/peers.log" 2>&1 || echo "peers failed"
tail -12 "$OUT/peers.log"
fi
# The quantized FFN's peer (two tinygemm calls + silu·mul) goes with the qffn parts or fused_ffn peers.
case "$PART ${PEERS}" in all*|qffn*|*fused_ffn*) QFFN_PEER=1 ;; *) QFFN_PEER=0 ;; esac
if [ "${NO_PEERS:-0}" != 1 ] && [ "$QFFN_PEER" = 1 ]; then
  PYTHONUNBUFFERED=1 python3 tests/peer_quant_ffn.py --json "$OUT/peers_qffn.json" >"$OUT/peers_qffn.log" 2>&1 ||
    echo "quantized-FFN peer failed"
  tail -3 "$OUT/peers_qffn.log"
fi

python3 - "$OUT" <<'PY'
import json, glob, sys, os
out = sys.argv[1]
peers = {}
if os.path.exists(f"{out}/peers.json"):
    for r in json.load(open(f"{out}/peers.json"))["rows"]:
        peers[r["case"]] = r["us"]
if os.path.exists(f"{out}/peers_qffn.json"):
    for r in json.load(open(f"{out}/peers_qffn.json"))["rows"]:
        peers[r["case"]] = r["us"]
print(f"\n{'spec':<44} {'qjit us':>8} {'%floor':>7} {'cuBLAS':>8} {'x cuBLAS':>8} {'torch':>8} {'x torch':>8} {'tune s':>7}")
benches = []
for f in sorted(glob.glob(f"{out}/bench_*.json"), key=lambda p: int(p.split("_")[-1].split(".")[0])):
    try: rows = json.load(open(f))
    except Exception: continue
    benches.append(rows)
    n = f.split("_")[-1].split(".")[0]
    try: tunes = {t["spec"]: t["wall_s"] for t in json.load(open(f"{out}/tune_{n}.json"))}
    except Exception: tunes = {}
    for b in rows:
        q = b["rows"][0]; base = b["rows"][1] if len(b["rows"]) > 1 else None
        extra = None
        op = b["spec"].split()[0]
        sp = dict(kv.split("=") for kv in b["spec"].split()[1:])
        if op == "fused_ffn" and sp.get("weights") == "native":
            # The torch column: two tinygemm calls + silu*mul (4-bit g128 only); fp16 torch on the next line.
            t = peers.get(f"torch 2x tinygemm int4 g128 + silu*mul d={sp['d']} h={sp['h']} M={sp['m']}") \
                if sp.get("bits", "4") == "4" and sp.get("g", "128") == "128" else None
            f16 = peers.get(f"torch fp16 (2 cuBLAS GEMM + silu*mul) d={sp['d']} h={sp['h']} M={sp['m']}")
            if f16: extra = f"  torch fp16 path {f16} us: qjit {f16 / q['median_us']:.2f}x faster"
        elif op == "fused_ffn":
            key = f"torch fp16 (2 cuBLAS GEMM + silu*mul) d={sp['d']} h={sp['h']} M={sp['m']}"
            t = peers.get(key) if sp["dtype"] == "fp16" and sp.get("act") == "silu" else None
        elif op == "fp_lut":
            t = peers.get(f"torch {sp['fn']} fp16 n=2^27") if sp["n"] == str(1 << 27) else None
        elif op == "wq_gemm":
            t = peers.get(f"torch tinygemm int4 g{sp['g']} M={sp['m']} K={sp['k']} N={sp['n']}") if sp["bits"] == "4" else None
        else:
            t = peers.get(f"torch ops K={sp['k']} N={sp['n']} g={sp['g']}") if sp["layout"] == "awq" else None
        label = b['spec']
        for d in ('act=silu ', 'cuts=default ', 'act=none ', 'bias=no ', 'layout=native ', 'scales=fp16 ', 'x=fp16 ',
                  'zero=int ', 'dtype=fp16 ', 'g=128 '):
            label = label.replace(d, '')
        # A column with nothing measured (no baseline, no peer, not tuned in this call) shows "-".
        num = lambda v, w, fmt, unit="": f"{format(v, fmt) + unit if v else '-':>{w}}"
        print(f"{label[:44]:<44} {q['median_us']:>8.2f} {q['pct_of_floor']:>6.1f}% "
              f"{num(base and base['median_us'], 8, '.2f')} {num(base and base['median_us'] / q['median_us'], 8, '.2f', 'x')} "
              f"{num(t, 8, '.2f')} {num(t and t / q['median_us'], 8, '.2f', 'x')} {num(tunes.get(b['spec']), 7, '.1f')}")
        if extra: print(extra)
print("copy GB/s (each bench run):", ", ".join(str(round(b["copy_gbps"])) for rows in benches for b in rows))
PY
