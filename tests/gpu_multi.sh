#!/usr/bin/env bash
# Several GPUs in one process, on the two-GPU machine: the C++ cases tagged
# [multi_gpu] (contexts of two devices, calls interleaved, a row tuned on
# device 0 serving device 1) in a fresh qjit_tests process, then the Python
# ones (python/tests/test_gpu_multi.py: torch.cuda.set_device(1), tensors
# on cuda:1 and cuda:0 interleaved, nothing run on device 0 by a process
# that uses cuda:1 only, a kernel tuned on device 0 used on device 1).
# With fewer than two devices both say so and check nothing. Builds nothing.
#   usage (repo root on the GPU machine): bash tests/gpu_multi.sh
# Expects the install tree in .dist as tests/gpu_python.sh does (cmake
# --install build --prefix .dist, and --component tests for qjit_tests).
# Writes $OUT/multi_tests.log and $OUT/multi_python.log.
set -u
DIST=${DIST:-.dist}
OUT=${OUT:-/tmp/qjit_out}
mkdir -p "$OUT" /tmp/qjit_multi
echo "== $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
export QJIT_CACHE=/tmp/qjit_multi/kernels.db
rm -f "$QJIT_CACHE"

echo "== C++: qjit_tests \"[gpu][multi_gpu]\""
"$DIST/bin/qjit_tests" "[gpu][multi_gpu]" >"$OUT/multi_tests.log" 2>&1
cpp=$?
grep -E "SKIPPED|warning|FAILED|failed|passed" "$OUT/multi_tests.log" | head -20
echo "C++ multi-GPU tests exit $cpp"

echo "== Python: test_gpu_multi"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export QJIT_LIBRARY="$PWD/$DIST/lib/libqjit_runtime.so" QJIT_CLI="$PWD/$DIST/bin/qjit" QJIT_REQUIRE_LIBRARY=1
( cd python/tests && python3 -m unittest -v test_gpu_multi ) >"$OUT/multi_python.log" 2>&1
py=$?
grep -E "^(FAIL|ERROR):|skipped|^Ran|^OK|^FAILED" "$OUT/multi_python.log" | head -20
echo "Python multi-GPU tests exit $py"
[ $cpp -eq 0 ] && [ $py -eq 0 ]
