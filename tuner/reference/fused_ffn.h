// CPU reference of fused_ffn, the obviously-correct version the kernel must
// equal within tolerance: every element widened exactly to double, float64
// dot products, SiLU in float64.
#pragma once
#include <cstdint>
#include <vector>
#include "codegen/spec.h"
#include "tuner/reference/awq_dequant.h"

namespace qjit::tuner {

// x, w1, w3 hold the spec's element types (fp16/bf16 as raw uint16 bits).
// Returns y[m * h + r] in float64. Uses up to `threads` threads.
std::vector<double> fused_ffn_reference(const codegen::OpSpec& spec, const void* x, const void* w1, const void* w3,
                                        int threads = 0);

// weights=native: y = SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ) with W1, W3 dequantised exactly
// (as wq_gemm_reference), x raw bytes of type dtype [m][d]; y [m][h].
std::vector<double> fused_ffn_native_reference(const codegen::OpSpec& spec, const uint8_t* x, const PlainQuant& w1,
                                               const PlainQuant& w3);

// Tolerance on ‖y − ref‖₂ / ‖ref‖₂ for the spec's output type, and the bound
// used for each element: |y_i − ref_i| ≤ 8 · tol · max|ref| (catches a few
// wildly wrong elements that the norm would average away).
double fused_ffn_tolerance(const codegen::OpSpec& spec);

}  // namespace qjit::tuner
