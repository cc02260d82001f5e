// Typed entry point of fused_ffn: argument checks, then launch through the
// kernel cache. The checks run before anything is launched or cached.
#include <cstdint>
#include <cstdio>
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

const char* to_string(Activation a) {
  switch (a) {
    case Activation::silu: return "silu";
    case Activation::silu_lut: return "silu_lut";
    case Activation::silu_lut_seed: return "silu_lut_seed";
  }
  return "?";
}

void fused_ffn(const FusedFfnShape& s, const void* x, const void* w1, const void* w3, void* y, CUstream_st* stream) {
  if (s.d <= 0 || s.h <= 0) throw Error("argument", "fused_ffn: d=" + std::to_string(s.d) + ", h=" +
                                                        std::to_string(s.h) + " (both must be positive)");
  if (s.m < 1 || s.m > 8) throw Error("argument", "fused_ffn: m=" + std::to_string(s.m) + " (expected 1..8)");
  char fast_key[96];
  std::snprintf(fast_key, sizeof(fast_key), "fused_ffn|%d|%d|%d|%d|%d", s.d, s.h, s.m, static_cast<int>(s.dtype),
                static_cast<int>(s.act));
  const std::initializer_list<const void*> pointers = {x, w1, w3, y};
  const runtime::LaunchPointers check{"fused_ffn", pointers};
  const auto make_spec = [&] {
    return codegen::make_spec("fused_ffn", {{"d", s.d},
                                            {"h", s.h},
                                            {"m", s.m},
                                            {"dtype", to_string(s.dtype)},
                                            {"act", to_string(s.act)}});
  };
  const auto& k = runtime::KernelCache::instance().get(fast_key, make_spec, &check);
  runtime::launch_checked(k, check, reinterpret_cast<CUstream>(stream));
}

void fused_ffn(const QuantFfnShape& s, const void* x, const QuantMatrix& w1, const QuantMatrix& w3, void* y,
               CUstream_st* stream) {
  if (s.d <= 0 || s.h <= 0) throw Error("argument", "fused_ffn: d=" + std::to_string(s.d) + ", h=" +
                                                        std::to_string(s.h) + " (both must be positive)");
  if (s.m < 1 || s.m > 8) throw Error("argument", "fused_ffn: m=" + std::to_string(s.m) + " (expected 1..8)");
  if (s.scales != DType::fp16 && s.scales != DType::bf16)
    throw Error("argument", std::string("fused_ffn: scales ") + to_string(s.scales) + " (expected fp16 or bf16)");
  if (s.x == DType::mixed) throw Error("argument", "fused_ffn: x mixed (expected fp16, bf16 or fp32)");
  char fast_key[160];
  std::snprintf(fast_key, sizeof(fast_key), "fused_ffn|native|%d|%d|%d|%d|%d|%s|%d|%d|%d", s.d, s.h, s.m, s.bits, s.g,
                s.zero.c_str(), static_cast<int>(s.scales), static_cast<int>(s.x), static_cast<int>(s.act));
  const std::initializer_list<const void*> pointers = {x, w1.qweight, w1.scales, w1.zeros,
                                                       w3.qweight, w3.scales, w3.zeros, y};
  const runtime::LaunchPointers check{"fused_ffn", pointers};
  const auto make_spec = [&] {
    return codegen::make_spec("fused_ffn", {{"d", s.d},
                                            {"h", s.h},
                                            {"m", s.m},
                                            {"dtype", to_string(s.x)},
                                            {"act", to_string(s.act)},
                                            {"weights", "native"},
                                            {"bits", s.bits},
                                            {"g", s.g},
                                            {"zero", s.zero},
                                            {"scales", to_string(s.scales)}});
  };
  const auto& k = runtime::KernelCache::instance().get(fast_key, make_spec, &check);
  runtime::launch_checked(k, check, reinterpret_cast<CUstream>(stream));
}

void set_cache_path(const std::string& path) { runtime::KernelCache::instance().set_path(path); }

}  // namespace qjit
