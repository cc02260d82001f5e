// Typed entry point of wq_gemm: argument checks, the M bucket, then launch
// through the kernel cache (one kernel per bucket).
#include <cstdio>
#include "codegen/ops/wq_gemm.h"
#include "qjit/qjit.h"
#include "runtime/kernel_cache.h"

namespace qjit {

void wq_gemm(const WqGemmShape& s, int m, const void* x, const void* qweight, const void* scales, const void* zeros,
             const void* bias, const void* residual, void* y, CUstream_st* stream) {
  if (m < 0) throw Error("argument", "wq_gemm: m=" + std::to_string(m) + " (rows of x must be >= 0)");
  if (m == 0) return;
  if (s.scales != DType::fp16 && s.scales != DType::bf16)
    throw Error("argument", std::string("wq_gemm: scales ") + to_string(s.scales) + " (expected fp16 or bf16)");
  if (s.x == DType::mixed) throw Error("argument", "wq_gemm: x mixed (expected fp16, bf16 or fp32)");
  if (s.bias != (bias != nullptr))
    throw Error("argument", std::string("wq_gemm: bias is ") + (bias ? "given" : "null") + " but the shape says bias=" +
                                (s.bias ? "true" : "false"));
  if (s.residual != (residual != nullptr))
    throw Error("argument", std::string("wq_gemm: residual is ") + (residual ? "given" : "null") +
                                " but the shape says residual=" + (s.residual ? "true" : "false"));
  const int bucket = codegen::wq_gemm_bucket(m);
  char fast_key[160];
  std::snprintf(fast_key, sizeof fast_key, "wq_gemm|%d|%d|%d|%d|%d|%s|%d|%d|%d|%s|%d", s.k, s.n, bucket, s.bits,
                s.g, s.zero.c_str(), static_cast<int>(s.scales), static_cast<int>(s.x), s.bias ? 1 : 0, s.act.c_str(),
                s.residual ? 1 : 0);
  const std::initializer_list<const void*> pointers = {x, qweight, scales, zeros, bias, residual, y};
  const runtime::LaunchPointers check{"wq_gemm", pointers};
  const auto make_spec = [&] {
    return codegen::make_spec("wq_gemm", {{"k", s.k},
                                          {"n", s.n},
                                          {"m", bucket},
                                          {"bits", s.bits},
                                          {"g", s.g},
                                          {"zero", s.zero},
                                          {"scales", to_string(s.scales)},
                                          {"x", to_string(s.x)},
                                          {"bias", s.bias ? "yes" : "no"},
                                          {"act", s.act},
                                          {"residual", s.residual ? "yes" : "no"}});
  };
  const auto& k = runtime::KernelCache::instance().get(fast_key, make_spec, &check);
  runtime::launch_checked(k, check, reinterpret_cast<CUstream>(stream), {m});
}

}  // namespace qjit
