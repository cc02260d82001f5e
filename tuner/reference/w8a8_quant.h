// w8a8_gemm's quantizers on the CPU: activations quantized online per row and
// per block of K, weights per output channel and per block of K. These are
// the definitions the GPU must reproduce bit for bit (codes, scales, offsets,
// block sums).
//
// Two block rules, each used for activations and weights alike:
//
// offset (seed 002's QuantA; the value is q·scale + offset):
//   The seed reads each element as float, takes the block's min and max in
//   float, then (every operation below is float32, IEEE round to nearest):
//     scale  = (max − min) / 255              float32 subtract, float32 divide
//     if |scale| > 1e-5:                      a float against a double literal;
//                                             float(1e-5) < 1e-5 < the next float,
//                                             so comparing in float or in double
//                                             agrees: float(1e-5) is degenerate
//       offset = max − scale·127              ONE rounding (fmaf): the seed writes
//                                             a multiply then a subtract, which
//                                             nvcc's default -fmad=true contracts
//                                             into one FFMA; the GPU kernel must
//                                             use __fmaf_rn(-scale, 127, max)
//     else: scale = 1, offset = max
//     q = roundf((x − offset) / scale)        float32 subtract, float32 divide
//                                             (nvcc's default -prec-div=true is
//                                             IEEE), roundf = half away from zero
//     q = clamp(q, −128, 127); ΣA = Σ q (int32)
//   max maps to 127 and min to −128. The seed stores scale and offset in the
//   activation type T (fp16 rounds them); qjit keeps them in float32, the
//   values the codes were made with.
//
// symmetric (per-token-group W8A8 as LLM checkpoints use it; no seed defines it,
// so DESIGN.md's rule applies: round half to even):
//     amax  = max |x|                          exact
//     scale = amax / 127                       float32 divide
//     if scale == 0 (amax = 0, or amax so small that amax/127 underflows):
//       scale = 1 (every code is then 0; any scale would dequantise to 0)
//     q = clamp(round_half_even(x / scale), −128, 127)   float32 divide
//   offset is 0 and |q| ≤ 127: x / scale cannot pass 127.5.
//
// Inputs must be finite; fp16/bf16 activations are widened to float32 first
// (exact), as the seed's (float) cast does.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qjit::tuner {

enum class BlockRule { offset, symmetric };

// One block's parameters: value ≈ q·scale + offset (offset 0 for symmetric).
struct BlockParams {
  float scale = 1.0f, offset = 0.0f;
  int32_t sum = 0;  // Σ of the block's codes
};

// Quantizes x[0 .. count) into q[0 .. count) by `rule`. Throws
// qjit::Error("argument", ...) for a non-finite value or a spread max − min
// that overflows float32.
BlockParams quantize_block(const float* x, int64_t count, BlockRule rule, int8_t* q);

// A matrix [rows][k] quantized per row and per block of k: codes [rows][k];
// scale, offset, sum [rows][k/block]. offset is all zeros for symmetric.
struct BlockQuantized {
  int64_t rows = 0, k = 0, block = 0;
  BlockRule rule = BlockRule::offset;
  std::vector<int8_t> q;
  std::vector<float> scale, offset;
  std::vector<int32_t> sum;
  int64_t blocks() const { return k / block; }
};

// Block sizes w8a8_gemm accepts: 32 ≤ block ≤ 512 and block | k. The upper
// bound keeps a block's int32 product |Σ a·b| ≤ 128·128·512 = 2^23, which a
// float32 holds exactly (the promotion to float loses nothing).
void check_w8a8_block(int64_t k, int64_t block);

// Activations x [m][k] (float32) quantized online: QuantA per row and block.
BlockQuantized quantize_activations(const std::vector<float>& x, int64_t m, int64_t k, int64_t block,
                                    BlockRule rule);

// Weights W [n][k] (float32) quantized per output channel n and block of k,
// by the same block rules (offset: the seed's q·s + o with QuantA's rounding;
// symmetric: scale only).
BlockQuantized pack_weights(const std::vector<float>& w, int64_t n, int64_t k, int64_t block, BlockRule rule);

// Weights already quantized (codes [n][k], scale and offset [n][k/block]; an
// empty offset means scale only): checks the sizes and computes ΣB.
BlockQuantized pack_weight_codes(std::vector<int8_t> q, std::vector<float> scale, std::vector<float> offset,
                                 int64_t n, int64_t k, int64_t block);

// Raw fp16/bf16/fp32 elements widened to float32 (exact).
std::vector<float> widen_to_float(const std::string& type, const void* data, size_t count);

}  // namespace qjit::tuner
