#!/usr/bin/env bash
# The Python package's tests on the GPU machine (python3 with torch, no
# network, nothing installed): every test of python/tests, the GPU ones
# against PyTorch (ops, the qjit.nn modules, wrong arguments, CUDA graph
# capture, the Llama-style MLP from an AWQ checkpoint, launch overhead from
# Python next to qjit_launch_probe's from C++). Builds nothing.
#   usage (repo root on the GPU machine): bash tests/gpu_python.sh [unittest names...]
#   e.g. bash tests/gpu_python.sh test_gpu.GpuOps.test_wq_gemm_against_torch; with no
#   names it also measures the host cost of a cache hit, Python next to C++ (test_gpu.measure_launch_overhead)
# Expects the install tree in .dist (cmake --install build --prefix .dist, and
# --component tests for qjit_launch_probe). The package runs from python/
# (PYTHONPATH), with the library, the qjit command and the probe taken from
# .dist. Writes $OUT/python_tests.log, $OUT/python_results.jsonl (one JSON
# line per measurement) and $OUT/kernels.db.
set -u
DIST=${DIST:-.dist}
OUT=${OUT:-/tmp/qjit_out}
mkdir -p "$OUT" /tmp/qjit_py
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export QJIT_LIBRARY="$PWD/$DIST/lib/libqjit_runtime.so" QJIT_CLI="$PWD/$DIST/bin/qjit"
export QJIT_LAUNCH_PROBE="$PWD/$DIST/bin/qjit_launch_probe" QJIT_REQUIRE_LIBRARY=1
export QJIT_CACHE=/tmp/qjit_py/kernels.db QJIT_PY_RESULTS="$OUT/python_results.jsonl"
rm -f "$QJIT_PY_RESULTS"
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
cd python/tests
if [ $# -gt 0 ]; then
  ( time python3 -m unittest -v "$@" ) >"$OUT/python_tests.log" 2>&1
else
  ( time python3 -m unittest discover -v -s . ) >"$OUT/python_tests.log" 2>&1
fi
rc=$?
# The host cost of a cache hit, Python next to C++ (a benchmark, not a test).
[ $# -eq 0 ] && python3 test_gpu.py >>"$OUT/python_tests.log" 2>&1
cd - >/dev/null
cp -f "$QJIT_CACHE" "$OUT/kernels.db" 2>/dev/null
grep -E "^(FAIL|ERROR):|skipped|^Ran|^OK|^FAILED" "$OUT/python_tests.log" | head -40
cat "$QJIT_PY_RESULTS" 2>/dev/null
echo "python tests exit $rc"
exit $rc
