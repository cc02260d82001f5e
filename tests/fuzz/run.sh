#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/ and runs
# each for SECONDS (default 30) from its seeds in tests/fuzz/corpus/<target>.
# Exits non-zero on the first finding (crash, sanitizer report, leak, timeout);
# libFuzzer leaves the input as build-fuzz/crash-* (or leak-*, timeout-*).
#   usage: bash tests/fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-30}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(spec config record_line lut_table cache_file npy safetensors)
command -v clang++ >/dev/null || { echo "fuzz: clang++ is needed (Debian: apt install clang)" >&2; exit 1; }
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DQJIT_FUZZ=ON -DBUILD_TESTING=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${TARGETS[@]/#/fuzz_}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in "${TARGETS[@]}"; do
  found=build-fuzz/corpus/$t  # what this run finds, kept out of the tree
  mkdir -p "$found"
  [ "$t" = cache_file ] && QJIT_FUZZ_WRITE_SEED="$found/seed.db" "build-fuzz/tests/fuzz/fuzz_$t"
  echo "== fuzz_$t for ${SECONDS_EACH} s"
  (cd build-fuzz && "tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=4096 \
     -max_len=65536 -print_final_stats=1 "corpus/$t" $(ls -d "../tests/fuzz/corpus/$t" 2>/dev/null) 2>&1 | tail -n 60)
done
echo "fuzz: no findings in ${#TARGETS[@]} target(s), ${SECONDS_EACH} s each"
