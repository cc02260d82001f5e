// Typed entry point of awq_dequant: argument checks, then launch through the kernel cache.
#include <cstdio>
#include "qjit/qjit.h"
#include "runtime/kernel_cache.h"

namespace qjit {

void awq_dequant(const AwqDequantShape& s, const void* qweight, const void* qzeros, const void* scales, void* out,
                 CUstream_st* stream) {
  if (s.scales != DType::fp16 && s.scales != DType::bf16)
    throw Error("argument", std::string("awq_dequant: scales ") + to_string(s.scales) + " (expected fp16 or bf16)");
  char fast_key[128];
  std::snprintf(fast_key, sizeof fast_key, "awq_dequant|%d|%d|%d|%s|%d|%d|%s", s.k, s.n, s.g, s.layout.c_str(),
                s.symmetric ? 1 : 0, static_cast<int>(s.scales), s.out.c_str());
  const std::initializer_list<const void*> pointers = {qweight, qzeros, scales, out};
  const runtime::LaunchPointers check{"awq_dequant", pointers};
  const auto make_spec = [&] {
    return codegen::make_spec("awq_dequant", {{"k", s.k},
                                              {"n", s.n},
                                              {"g", s.g},
                                              {"layout", s.layout},
                                              {"zero", s.symmetric ? "sym" : "int"},
                                              {"scales", to_string(s.scales)},
                                              {"out", s.out}});
  };
  const auto& k = runtime::KernelCache::instance().get(fast_key, make_spec, &check);
  runtime::launch_checked(k, check, reinterpret_cast<CUstream>(stream));
}

}  // namespace qjit
