#!/usr/bin/env bash
# Tuning time on the GPU machine: the staged search (the default) against the
# exhaustive one (--exhaustive) on the BENCHMARKS.md rows, each from an empty
# cache, then both winners of each row benched in one process, alternating.
# Each MODE fits in one 10-minute command; caches stay in $WORK between calls
# on a warm machine, logs come back as $OUT/tune_speed_logs.tgz.
#   usage (repo root): bash tests/gpu_tune_speed.sh MODE [ROW...]
#   MODE:
#     fast            the staged search of the rows (default all; about 10-15 s each)
#     exhaustive      the exhaustive search of the rows given (default all: too long for
#                     one call; the wq_gemm buckets take 60-175 s each): e.g. `exhaustive 1 2`,
#                     `exhaustive 3 4`, `exhaustive 5 6 7 8`
#     table           bench the two winners of each row tuned both ways (two rounds,
#                     alternating) and print the table
#     range           `--m 1-1024` for 4096 x 11008 with the staged search (DEVICES=all: on every GPU)
#     devices         the rows (default 1 2 3 4 5 6 8) with --devices all and with --devices 0, each
#                     from an empty cache: wall time of each and the winners side by side
#                     (needs a machine with two GPUs, e.g. the nvidia-h100-x2 kind)
#   ROW: a number from the list below. Environment: DIST (install tree, default .dist),
#   WORK (default .device/tune_speed), OUT (where the logs go), SEED (default 1).
# Expects the install tree in .dist (cmake --install build --prefix .dist).
set -u
DIST=${DIST:-.dist}
Q="$DIST/bin/qjit"
WORK=${WORK:-.device/tune_speed}
FINAL=${OUT:-/tmp/qjit_tune_speed_out}
SEED=${SEED:-1}
# From scratch means no compiles kept from an earlier run either (cache/compile_cache.h).
export QJIT_COMPILE_CACHE=
LOGS="$WORK/logs"
mkdir -p "$WORK" "$LOGS" "$FINAL"
trap 'tar czf "$FINAL/tune_speed_logs.tgz" -C "$WORK" logs $(cd "$WORK" && ls ./*.json 2>/dev/null)' EXIT

ROWS=("wq_gemm k=4096,n=11008 --m 1"
      "wq_gemm k=4096,n=11008 --m 16"
      "wq_gemm k=4096,n=11008 --m 256"
      "wq_gemm k=4096,n=11008 --m 1024"
      "fp_lut n=134217728,fn=silu"
      "fused_ffn d=4096,h=11008 --m 1"
      "fused_ffn d=4096,h=11008,weights=native --m 1"
      "awq_dequant k=4096,n=11008,g=128")

# Seconds since T0 (a `date +%s.%N`), one decimal.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

MODE=${1:-}
shift || true
PICK=("$@")
if [ ${#PICK[@]} = 0 ]; then
  if [ "$MODE" = devices ]; then PICK=(1 2 3 4 5 6 8); else PICK=($(seq 1 ${#ROWS[@]})); fi
fi
echo "== $(date -u +%FT%TZ) $MODE ${PICK[*]}: $(nvidia-smi --query-gpu=index,name --format=csv,noheader | tr '\n' ' ')"
echo "   host threads: $(nproc)"

# tune_row KIND I [extra args]: one row from an empty cache $WORK/KIND_I.db;
# the report as $WORK/KIND_I.json, progress in $LOGS/KIND_I.log, the wall
# time of the whole process (start-up included) in $WORK/KIND_I.wall.
tune_row() {
  local kind=$1 i=$2
  shift 2
  local row=${ROWS[$((i - 1))]}
  local op=${row%% *} rest=${row#* }
  local db="$WORK/${kind}_$i.db"
  rm -f "$db" "$db-wal" "$db-shm"
  local t0
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$Q" tune --op "$op" --shape $rest --cache "$db" --seed "$SEED" --json "$@" >"$WORK/${kind}_$i.json" 2>"$LOGS/${kind}_$i.log"
  local rc=$?
  since "$t0" >"$WORK/${kind}_$i.wall"
  python3 - "$WORK/${kind}_$i.json" "$(cat "$WORK/${kind}_$i.wall")" "$kind" "$row" "$rc" <<'PY'
import json, sys
path, wall, kind, row, rc = sys.argv[1:]
try:
    r = json.load(open(path))[0]
except Exception:
    print(f"  {kind:10} {row:48} FAILED (exit {rc}); see the log")
    sys.exit()
extra = (f"screened {r['screened_now']}, confirmed {r['measured_now']}, compiles {r['compiles']} "
         f"(+{r['compiles_reused']} reused, +{r.get('compiles_cached', 0)} cached), screen {r['screen_wall_s']:.1f} s, confirm {r['confirm_wall_s']:.1f} s"
         if r["search"] == "staged" else
         f"measured {r['measured_now']}, compiles {r['compiles']} (+{r['compiles_reused']} reused, "
         f"+{r.get('compiles_cached', 0)} cached), "
         f"compile {r['compile_wall_s']:.1f} s")
print(f"  {kind:10} {row:48} {float(wall):6.1f} s  best {r['best']['median_us']:8.2f} us  {extra}")
PY
}

# The rows of one run with --devices DEV (all or 0) into one empty cache: its wall time and winners.
devices_run() {
  local dev=$1 name=$2
  local db="$WORK/$name.db"
  rm -f "$db" "$db-wal" "$db-shm"
  : >"$WORK/$name.json"
  local manifest="$WORK/$name.manifest"
  : >"$manifest"
  local i
  for i in "${PICK[@]}"; do
    local row=${ROWS[$((i - 1))]}
    local op=${row%% *} rest=${row#* }
    local shape=${rest%% *} m=""
    case "$rest" in *"--m "*) m=${rest##*--m } ;; esac
    [ -n "$m" ] && shape="$shape,m=$m"
    printf '{"op": "%s", "shape": "%s"}\n' "$op" "$shape" >>"$manifest"
  done
  local t0
  t0=$(date +%s.%N)
  "$Q" tune --manifest "$manifest" --devices "$dev" --cache "$db" --seed "$SEED" --json >"$WORK/$name.json" \
    2>"$LOGS/$name.log"
  echo "  --devices $dev: exit $?, $(since "$t0") s for ${#PICK[@]} specs"
}

case "$MODE" in
  fast)
    for i in "${PICK[@]}"; do tune_row fast "$i"; done ;;
  exhaustive)
    for i in "${PICK[@]}"; do tune_row exhaustive "$i" --exhaustive; done ;;
  range)
    db="$WORK/range.db"
    rm -f "$db" "$db-wal" "$db-shm"
    t0=$(date +%s.%N)
    "$Q" tune --op wq_gemm --shape k=4096,n=11008 --m 1-1024 --cache "$db" --seed "$SEED" --json \
      ${DEVICES:+--devices "$DEVICES"} >"$WORK/range.json" 2>"$LOGS/range.log"
    echo "  --m 1-1024 ${DEVICES:+(--devices $DEVICES) }exit $?: $(since "$t0") s"
    python3 - "$WORK/range.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(f"    {r['spec'][:60]:60} {r['wall_s']:6.1f} s  best {r['best']['median_us']:8.2f} us  "
          f"screened {r['screened_now']}, GPU {r['device_ordinal']}")
PY
    ;;
  devices)
    devices_run all devices_all
    devices_run 0 devices_one
    python3 - "$WORK/devices_all.json" "$WORK/devices_one.json" <<'PY'
import json, sys
try:
    a, o = (json.load(open(p)) for p in sys.argv[1:])
except Exception as e:
    sys.exit(f"  no reports to compare: {e}")
print(f"  {'spec':58} {'gpu':>3} {'all: us':>9} {'one: us':>9}  same config")
for x, y in zip(a, o):
    same = "yes" if x["best"]["config"] == y["best"]["config"] else "no: " + json.dumps(x["best"]["config"])
    print(f"  {x['spec'][:58]:58} {x['device_ordinal']:3} {x['best']['median_us']:9.2f} {y['best']['median_us']:9.2f}  {same}")
PY
    ;;
  table)
    python3 - "$WORK" "$Q" "${PICK[@]}" <<'PY' | tee "$FINAL/tune_speed_table.txt"
import json, os, subprocess, sys
work, q, picks = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]
rows = ["wq_gemm k=4096,n=11008 --m 1", "wq_gemm k=4096,n=11008 --m 16", "wq_gemm k=4096,n=11008 --m 256",
        "wq_gemm k=4096,n=11008 --m 1024", "fp_lut n=134217728,fn=silu", "fused_ffn d=4096,h=11008 --m 1",
        "fused_ffn d=4096,h=11008,weights=native --m 1", "awq_dequant k=4096,n=11008,g=128"]
def bench(row, db):
    op, rest = row.split(" ", 1)
    out = subprocess.run([q, "bench", "--op", op, "--shape", *rest.split(), "--cache", db, "--json"],
                         capture_output=True, text=True)
    try:
        return json.load(__import__("io").StringIO(out.stdout))[0]["rows"][0]["median_us"]
    except Exception:
        return float("nan")
def report(kind, i):
    try:
        r = json.load(open(f"{work}/{kind}_{i}.json"))[0]
        wall = float(open(f"{work}/{kind}_{i}.wall").read())
        return r, wall
    except Exception:
        return None, float("nan")
print(f"{'spec':46} {'fast s':>7} {'exh. s':>7} {'fast us':>8} {'exh. us':>8} {'bench f':>8} {'bench e':>8} {'ratio':>6}  same")
for i in picks:
    f, fw = report("fast", i)
    e, ew = report("exhaustive", i)
    if not f:
        print(f"{rows[i-1]:46} (no fast run)")
        continue
    bf, be = [], []
    if e:
        for _ in range(2):  # alternating, in one call of this machine
            bf.append(bench(rows[i-1], f"{work}/fast_{i}.db"))
            be.append(bench(rows[i-1], f"{work}/exhaustive_{i}.db"))
    mf, me = (min(bf), min(be)) if e else (float("nan"), float("nan"))
    same = ("yes" if f["best"]["config"] == e["best"]["config"] else "no") if e else ""
    print(f"{rows[i-1]:46} {fw:7.1f} {ew:7.1f} {f['best']['median_us']:8.2f} "
          f"{(e['best']['median_us'] if e else float('nan')):8.2f} {mf:8.2f} {me:8.2f} {mf / me:6.3f}  {same}")
print("fast/exh. s: wall time of `qjit tune` from an empty cache (process start included); fast/exh. us: the "
      "winner's time in its own tune; bench f/e: the faster of two `qjit bench` rounds of each cache's winner, "
      "alternating; ratio = bench f / bench e (the target: <= 1.02).")
PY
    ;;
  *)
    sed -n 2,22p "$0"
    exit 2 ;;
esac
