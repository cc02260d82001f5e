// qjit runtime: launch tuned, specialised kernels on device pointers.
//
//   qjit::FusedFfnShape s{.d = 4096, .h = 11008, .m = 1, .dtype = qjit::DType::fp16};
//   qjit::fused_ffn(s, x, w1, w3, y, stream);
//
// The first call for a shape looks the kernel up in the cache
// ($QJIT_CACHE or ~/.cache/qjit/kernels.db; see set_cache_path); later calls
// hit an in-memory map. A shape never tuned is compiled with the op's default
// config and stored marked untuned (run `qjit tune` to tune it).
// Every entry point validates its arguments and throws qjit::Error naming the
// bad value; nothing is launched then.
#pragma once
#include <string>
#include "codegen/error.h"

struct CUstream_st;  // CUstream / cudaStream_t

namespace qjit {

enum class DType { fp16, bf16, fp32, mixed };  // mixed: fp32 activations/output, fp16 weights
const char* to_string(DType t);

// y[m, h] = SiLU(x[m, d] · W1[h, d]ᵀ) ⊙ (x[m, d] · W3[h, d]ᵀ), fp32 accumulation.
struct FusedFfnShape {
  int d = 0;
  int h = 0;
  int m = 1;  // 1..8
  DType dtype = DType::fp16;
};
void fused_ffn(const FusedFfnShape& shape, const void* x, const void* w1, const void* w3, void* y,
               CUstream_st* stream = nullptr);

// Use another cache file for this process (default: $QJIT_CACHE or ~/.cache/qjit/kernels.db).
void set_cache_path(const std::string& path);

}  // namespace qjit
