// Typed entry point of fused_ffn: argument checks, then launch through the
// kernel cache. The checks run before anything is launched or cached.
#include <cstdint>
#include <cstdio>
#include "codegen/ops/fused_ffn.h"
#include "qjit/qjit.h"
#include "runtime/kernel_cache.h"

namespace qjit {

const char* to_string(DType t) {
  switch (t) {
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::fp32: return "fp32";
    case DType::mixed: return "mixed";
  }
  return "?";
}

static void check_pointer(const char* name, const void* p, int align) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (!p) throw Error("argument", std::string("fused_ffn: ") + name + " is null");
  if (addr % align)
    throw Error("argument", std::string("fused_ffn: ") + name + " = " + std::to_string(addr) + " is not aligned to " +
                                std::to_string(align) + " bytes (the kernel's vector access)");
}

void fused_ffn(const FusedFfnShape& s, const void* x, const void* w1, const void* w3, void* y, CUstream_st* stream) {
  if (s.d <= 0 || s.h <= 0) throw Error("argument", "fused_ffn: d=" + std::to_string(s.d) + ", h=" +
                                                        std::to_string(s.h) + " (both must be positive)");
  if (s.m < 1 || s.m > 8) throw Error("argument", "fused_ffn: m=" + std::to_string(s.m) + " (expected 1..8)");
  char fast_key[96];
  std::snprintf(fast_key, sizeof(fast_key), "fused_ffn|%d|%d|%d|%d", s.d, s.h, s.m, static_cast<int>(s.dtype));
  const auto& k = runtime::KernelCache::instance().get(fast_key, [&] {
    return codegen::make_spec("fused_ffn", {{"d", s.d}, {"h", s.h}, {"m", s.m}, {"dtype", to_string(s.dtype)}});
  });
  // Alignment the chosen config relies on: one vector of W, the matching span of x.
  const auto t = codegen::fused_ffn_types(to_string(s.dtype));
  const int vec_bytes = k.config.value("vec_bytes", 16);  // the mma family reads 16-byte rows
  const int x_align = std::min(16, vec_bytes / t.w_bytes * t.x_bytes);
  check_pointer("x", x, x_align);
  check_pointer("w1", w1, vec_bytes);
  check_pointer("w3", w3, vec_bytes);
  check_pointer("y", y, t.y_bytes);
  void* args[] = {&x, &w1, &w3, &y};
  runtime::launch(k, args, reinterpret_cast<CUstream>(stream));
}

void set_cache_path(const std::string& path) { runtime::KernelCache::instance().set_path(path); }

}  // namespace qjit
