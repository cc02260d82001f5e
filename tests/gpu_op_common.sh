# Sourced by the per-op GPU-machine scripts (gpu_w8a8.sh, gpu_qconv2d.sh):
# the install tree, a work folder whose out/ comes back as one tarball
# $OUT/<name>_logs.tgz (the device tool returns a few files only), a fresh
# kernel cache, and run_tests PATTERN for the op's [gpu] tests.
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
