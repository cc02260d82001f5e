// The float64 reference of w8a8_gemm (seed 002's "scheme 2, online
// quantization"): Y = dequant(quant(X) · Wqᵀ) + bias, clamped.
//
// With A = quantize_activations(X) and W = pack_weights(...) (w8a8_quant.h),
// blocks i of K (size K_i = block), for each m, n:
//   Cq_i  = Σ_{k ∈ block i} A.q[m][k] · W.q[n][k]        int64, exact
//   Y[m][n] = Σ_i ( sA·sB·Cq_i + sA·oB·ΣA_i + oA·sB·ΣB_i + K_i·oA·oB ) + bias[n]
//   then the clamp (none / relu / relu6),
// where sA, oA, ΣA are A's scale, offset, sum of row m and block i and sB, oB,
// ΣB W's of channel n and block i. The combination is evaluated in float64.
// It is Σ_k (sA·qa + oA)(sB·qb + oB) expanded, the seed's DequantAndAcc
// formula; a symmetric side has offset 0 and its terms vanish.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tuner/reference/w8a8_quant.h"

namespace qjit::tuner {

struct W8A8Result {
  int64_t m = 0, n = 0;           // m: the rows evaluated
  std::vector<double> y;          // [m][n], after bias and clamp
  std::vector<double> magnitude;  // [m][n]: Σ_i of the four |terms| + |bias|, the scale of rounding errors
};

// a: quantized activations [M][k]; w: weights [n][k] of the same k and block;
// bias: [n] or empty; act: "none", "relu" or "relu6"; rows: the rows of A to
// evaluate (large M is verified on a sample), empty for all M. Threads over n.
// Throws qjit::Error ("spec" for a mismatched k, block or act; "argument" for
// the bias size or a row out of range).
W8A8Result w8a8_gemm_reference(const BlockQuantized& a, const BlockQuantized& w, const std::vector<float>& bias,
                               const std::string& act, const std::vector<int64_t>& rows = {});

// The largest |gpu − reference| allowed for one output element of a GPU plan
// that combines the block products in float32 (any order of operations, fused
// multiply-adds or not) and writes y as out_type ("fp32", "fp16", "bf16").
//
// Why: every input of the combination is exact in float32 (|Cq_i| ≤ 2^23,
// |ΣA|, |ΣB| ≤ 2^16, K_i ≤ 512, scales and offsets are float32), so the only
// errors are roundings. Each term is a product of three factors (2 roundings),
// the four terms of a block are summed (≤ 3 roundings on any path), the P
// block results and the bias are accumulated (≤ P roundings on a path). With
// n = P + 6 and u = 2^-24, the float32 result is within γ_n · magnitude,
// γ_n = n·u / (1 − n·u) (Higham, "Accuracy and Stability of Numerical
// Algorithms", §3.1). The clamp moves no two values further apart. Writing y
// adds u_out·|y| (u_out = 2^-24 fp32, 2^-11 fp16, 2^-8 bf16) plus half the
// smallest subnormal step of fp16 (2^-25) for values under its normal range.
// The reference's own float64 error is added with u = 2^-53.
// A plan that stores the activation scales in fp16 as the seed does is not
// covered: that rounding is an error of its own, not of the combination.
double w8a8_tolerance(double magnitude, double y, int64_t blocks, const std::string& out_type);

}  // namespace qjit::tuner
