#!/usr/bin/env bash
# gru_quant on the GPU machine: its [gpu] tests, the cluster-exchange probe,
# a tune and bench of the issue's shapes (8-bit params, T = 100), cuDNN's
# GRU through peers.py, and a table last. Logs and JSON go to $OUT.
#   usage (repo root on the GPU machine): bash tests/gpu_gru.sh [tests|bench|probe|all]
# Expects the install tree in .dist (with --component tests) and peers.py in .device/peers.py.
set -u
DIST=${DIST:-.dist}
Q="$DIST/bin/qjit"
# Logs go to a work folder and come back as one tarball (the device tool
# returns a few files only).
FINAL=${OUT:-/tmp/qjit_gru_out}
OUT=/tmp/qjit_gru/out
rm -rf /tmp/qjit_gru
mkdir -p "$OUT" "$FINAL"
trap 'tar czf "$FINAL/gru_logs.tgz" -C /tmp/qjit_gru out' EXIT
export QJIT_CACHE=/tmp/qjit_gru.db
PART=${1:-all}
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"

if [ "$PART" = all ] || [ "$PART" = tests ]; then
  echo "== GPU tests (gru_quant)"
  ( time "$DIST/bin/qjit_tests" "gru_quant*" ) >"$OUT/gru_tests.log" 2>&1
  echo "gru tests exit $?"; grep -E "FAILED|failed|passed" "$OUT/gru_tests.log" | head -20; tail -3 "$OUT/gru_tests.log"
fi
if [ "$PART" = all ] || [ "$PART" = tests ]; then
  echo "== against torch.nn.GRU (calibrate, run on the GPU and the CPU)"
  for args in "" "--c 256 --h 256 --t 100 --n 4"; do
    python3 tests/gru_vs_torch.py "$Q" $args >>"$OUT/vs_torch.log" 2>&1; echo "gru_vs_torch $args: exit $?"
  done
  tail -12 "$OUT/vs_torch.log"
fi
[ "$PART" = tests ] && exit 0

echo "== cluster probe"
"$DIST/bin/qjit_cluster_probe" | tee "$OUT/cluster_probe.jsonl"

# An 8-bit layer (every activation 8-bit, weights 8-bit, biases 16-bit): the
# speed depends on the widths and shapes, not on the values.
params() {
  python3 - "$1" "$2" <<'PY'
import json, sys
c, h = int(sys.argv[1]), int(sys.argv[2])
t = lambda shift, signed=True: {"bits": 8, "signed": signed, "shift": shift, "zp": 0}
print(json.dumps({"input_size": c, "hidden_size": h,
    "tensors": {"x": t(5), "h": t(7), "ih": t(3), "hh": t(3), "u_in": t(3), "u_out": t(8, False), "r_in": t(3),
                "r_out": t(8, False), "n_in": t(3), "n_out": t(7)},
    "weights": {"W": {"bits": 8, "shift": 9}, "R": {"bits": 8, "shift": 9},
                "bw": {"bits": 16, "shift": 12}, "br": {"bits": 16, "shift": 12}}}))
PY
}
# PART=probe: only the step timeline of one config per shape (qjit_gru_probe).
if [ "$PART" = probe ]; then
  i=0
  for s in "1 256" "16 512" "64 256" "16 1024"; do
    i=$((i+1)); set -- $s; n=$1; h=$2
    params "$h" "$h" >"$OUT/gru8_$h.json"
    for cfg in '{"batch":8,"cluster":16,"family":"cluster","input":"pre","ksplit":2,"warps":16}' \
               '{"batch":8,"cluster":8,"family":"cluster","input":"fused","ksplit":2,"warps":8}'; do
      [ "$n" = 1 ] && cfg=${cfg/\"batch\":8/\"batch\":1}
      "$DIST/bin/qjit_gru_probe" "$OUT/gru8_$h.json" 100 "$n" "$cfg" 2>&1 | tee -a "$OUT/gru_probe.jsonl"
    done
  done
  exit 0
fi
rm -f "$QJIT_CACHE"
i=0
for s in "1 256" "16 512" "64 256" "16 1024"; do
  i=$((i+1)); set -- $s; n=$1; h=$2
  params "$h" "$h" >"$OUT/gru8_$h.json"
  shape="t=100,n=$n,c=$h,h=$h,params=@$OUT/gru8_$h.json"
  /usr/bin/time -f "tune wall %e s" "$Q" tune --op gru_quant --shape "$shape" --json >"$OUT/tune_$i.json" 2>>"$OUT/tune.log"
  tail -1 "$OUT/tune.log"
  "$Q" bench --op gru_quant --shape "$shape" --json >"$OUT/bench_$i.json" 2>>"$OUT/bench.log" || echo "bench $s failed"
  "$Q" show --op gru_quant --shape "$shape" >"$OUT/show_$i.txt" 2>&1  # the trial leaderboard
  # The winner's step timeline (where a step's time goes).
  cfg=$(python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))[0]["rows"][0]["config"]
print(c if isinstance(c, str) else json.dumps(c))' "$OUT/bench_$i.json" 2>/dev/null)
  case "$cfg" in *cluster*) "$DIST/bin/qjit_gru_probe" "$OUT/gru8_$h.json" 100 "$n" "$cfg" 2>&1 | tee -a "$OUT/gru_probe.jsonl" ;; esac
  # Each kernel of the winner's plan on its own (the input projection, the persistent kernel).
  if command -v ncu >/dev/null && [ "${NCU:-1}" = 1 ]; then
    ncu --clock-control none -k regex:qjit_gru --launch-skip 4 --launch-count 2 --metrics gpu__time_duration.sum \
      "$Q" bench --op gru_quant --shape "$shape" >"$OUT/ncu_$i.txt" 2>&1
    grep -E "qjit_gru|gpu__time_duration" "$OUT/ncu_$i.txt" | sed 's/^ */  /' | head -4
  fi
done

echo "== cuDNN (peers.py gru_quant)"
PYTHONUNBUFFERED=1 python3 .device/peers.py gru_quant --json "$OUT/peers.json" >"$OUT/peers.log" 2>&1 || echo "peers failed"
tail -9 "$OUT/peers.log"

python3 - "$OUT" <<'PY'
import json, glob, os, sys
out = sys.argv[1]
peers = {}
if os.path.exists(f"{out}/peers.json"):
    for r in json.load(open(f"{out}/peers.json"))["rows"]:
        peers[r["case"]] = r["us"]
# The winners' step timelines (qjit_gru_probe): the exchange (pushes + wait) and the whole step, in µs.
probe = {}
if os.path.exists(f"{out}/gru_probe.jsonl"):
    for line in open(f"{out}/gru_probe.jsonl"):
        try: j = json.loads(line)
        except Exception: continue
        probe[j["spec"]] = ((j["push"][1] + j["wait"][1]), j["step"][1])
print(f"\n{'N':>3} {'H':>5} {'qjit us':>9} {'us/step':>8} {'config':<70} {'cuDNN fp16':>10} {'x fp16':>7} {'cuDNN fp32':>10} {'x fp32':>7} {'exchange':>8} {'step':>6}")
for i, (n, h) in enumerate([(1, 256), (16, 512), (64, 256), (16, 1024)], 1):
    try:
        b = json.load(open(f"{out}/bench_{i}.json"))[0]
    except Exception:
        print(f"{n:>3} {h:>5} (no bench)"); continue
    q = b["rows"][0]
    us = q["median_us"]
    cfg = q.get("config")
    if isinstance(cfg, str):
        try: cfg = json.loads(cfg)
        except Exception: cfg = {}
    f16 = next((v for k, v in peers.items() if k.startswith(f"cuDNN GRU float16 T=100 N={n} C={h} H={h} ")), None)
    f32 = next((v for k, v in peers.items() if k.startswith(f"cuDNN GRU float32 T=100 N={n} C={h} H={h} ")), None)
    exchange, step = probe.get(f"t=100 n={n} c={h} h={h}", (float("nan"), float("nan")))
    cfg = json.dumps(cfg, separators=(",", ":"))
    print(f"{n:>3} {h:>5} {us:>9.1f} {us / 100:>8.2f} {cfg[:70]:<70} {f16 or 0:>10.1f} {(f16 or 0) / us:>7.2f} "
          f"{f32 or 0:>10.1f} {(f32 or 0) / us:>7.2f} {exchange:>8.2f} {step:>6.2f}")
PY
