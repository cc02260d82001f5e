// Typed entry point of fp_lut: argument checks, then launch through the kernel cache.
#include <cstdio>
#include "qjit/qjit.h"
#include "runtime/kernel_cache.h"

namespace qjit {

void fp_lut(const FpLutShape& s, const void* x, void* y, CUstream_st* stream) {
  if (s.n <= 0) throw Error("argument", "fp_lut: n=" + std::to_string(s.n) + " (must be positive)");
  if (s.in == DType::mixed || s.out == DType::mixed)
    throw Error("argument", "fp_lut: in/out must be fp16, bf16 or fp32, not mixed");
  const std::string fast_key = "fp_lut|" + s.fn + "|" + std::to_string(s.n) + "|" + to_string(s.in) + "|" +
                               to_string(s.out) + "|" + s.cuts;
  const std::initializer_list<const void*> pointers = {x, y};
  const runtime::LaunchPointers check{"fp_lut", pointers};
  const auto make_spec = [&] {
    return codegen::make_spec(
        "fp_lut", {{"fn", s.fn}, {"n", s.n}, {"in", to_string(s.in)}, {"out", to_string(s.out)}, {"cuts", s.cuts}});
  };
  const auto& k = runtime::KernelCache::instance().get(fast_key, make_spec, &check);
  runtime::launch_checked(k, check, reinterpret_cast<CUstream>(stream));
}

}  // namespace qjit
