# Sourced by the per-op GPU-machine scripts (gpu_w8a8.sh, gpu_qconv2d.sh):
# the install tree, a work folder whose out/ comes back as one tarball
# $OUT/<name>_logs.tgz (the device tool returns a few files only), a fresh
# kernel cache, run_tests PATTERN for the op's [gpu] tests, tune_bench for one
# shape and run_peers for PyTorch's side.
#   usage: NAME=w8a8; source tests/gpu_op_common.sh
DIST=${DIST:-.dist}
Q="$DIST/bin/qjit"
FINAL=${OUT:-/tmp/qjit_${NAME}_out}
OUT=/tmp/qjit_$NAME/out
rm -rf "/tmp/qjit_$NAME"
mkdir -p "$OUT" "$FINAL"
trap 'tar czf "$FINAL/${NAME}_logs.tgz" -C "/tmp/qjit_$NAME" out' EXIT
export QJIT_CACHE=/tmp/qjit_$NAME.db
rm -f "$QJIT_CACHE"
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"

run_tests() {
  echo "== GPU tests ($*)"
  ( time "$DIST/bin/qjit_tests" "$@" ) >"$OUT/tests.log" 2>&1
  echo "tests exit $?"; grep -E "FAILED|failed|passed" "$OUT/tests.log" | head -20; tail -3 "$OUT/tests.log"
}

# tune_bench OP SHAPE I LABEL [tune options...]: a tune from scratch, a bench and
# the trial leaderboard of one shape, as $OUT/tune_I.json, bench_I.json and show_I.json.
tune_bench() {
  local op=$1 shape=$2 i=$3 label=$4
  shift 4
  /usr/bin/time -f "tune $label: wall %e s" "$Q" tune --op "$op" --shape "$shape" "$@" --json >"$OUT/tune_$i.json" 2>>"$OUT/tune.log"
  tail -1 "$OUT/tune.log"
  "$Q" bench --op "$op" --shape "$shape" --json >"$OUT/bench_$i.json" 2>>"$OUT/bench.log" || echo "bench $label failed"
  "$Q" show --op "$op" --shape "$shape" --json >"$OUT/show_$i.json" 2>&1
}

# run_peers OP LINES: peers.py OP into $OUT/peers.json, the last LINES lines of its log shown.
run_peers() {
  echo "== PyTorch peers (peers.py $1)"
  PYTHONUNBUFFERED=1 python3 .device/peers.py "$1" --json "$OUT/peers.json" >"$OUT/peers.log" 2>&1 || echo "peers failed"
  tail -"$2" "$OUT/peers.log"
}
