// w8a8_gemm's FP8 variant on the CPU (format=e4m3: the e4m3 tensor cores of
// sm_89+; the block format DeepGEMM uses): the e4m3 encoding, its block
// quantizers, the float64 reference of the block-scaled GEMM and the
// tolerance a GPU plan is checked with.
//
// e4m3 ("e4m3fn", OCP 8-bit floating point, as PTX's .e4m3): 1 sign bit, 4
// exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN;
// largest finite 448 = 1.75·2^8; subnormals m/8·2^-6. Encoding rounds to
// nearest, ties to even, and saturates to ±448 (PTX cvt.rn.satfinite.e4m3x2.f32,
// the instruction a kernel converts with); NaN stays NaN.
//
// Block rule (DeepGEMM's 1×128 activation / 128×128 weight blocks; any
// block size here): scale = amax / 448 (float32 divide; 1 when amax is 0),
// q = e4m3(x / scale) (float32 divide, then the encoding). The value is
// decode(q)·scale.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qjit::tuner {

uint8_t e4m3_from_float(float x);
float e4m3_to_float(uint8_t code);  // exact

// x [rows][k] (float32) per row and block of k: codes [rows][k], scale [rows][k/block].
struct Fp8Rows {
  int64_t rows = 0, k = 0, block = 0;
  std::vector<uint8_t> q;
  std::vector<float> scale;
};
Fp8Rows quantize_fp8_rows(const std::vector<float>& x, int64_t rows, int64_t k, int64_t block);

// W [n][k] (float32) per tile of block_n rows × block_k columns (DeepGEMM: 128 × 128):
// codes [n][k], scale [n/block_n][k/block_k].
struct Fp8Tiles {
  int64_t n = 0, k = 0, block_n = 0, block_k = 0;
  std::vector<uint8_t> q;
  std::vector<float> scale;
};
Fp8Tiles quantize_fp8_tiles(const std::vector<float>& w, int64_t n, int64_t k, int64_t block_n, int64_t block_k);

// y[m][n] = clamp(Σ_b sA[m][b]·sW[n/block_n][b]·Σ_{k∈b} decode(qa)·decode(qw) + bias[n]) in float64,
// for the rows `rows` of a (empty: all); a.block must equal w.block_k. Throws
// qjit::Error("spec", ...) for mismatched shapes or blocks, an unknown act, a bias of the wrong size.
std::vector<double> fp8_gemm_reference(const Fp8Rows& a, const Fp8Tiles& w, const std::vector<float>& bias,
                                       const std::string& act, const std::vector<int64_t>& rows = {});

// The reference with, per element, the scales its GPU plan's roundings grow with.
struct Fp8GemmResult {
  int64_t m = 0, n = 0;               // m: the rows evaluated
  std::vector<double> y;              // [m][n], after bias and clamp
  std::vector<double> magnitude;      // Σ_b |sA·sW|·Σ_{k∈b} |qa·qw| + |bias|
  std::vector<double> tc_magnitude;   // Σ_b |sA·sW|·T_b (fp8_tensor_core_bound)
};
Fp8GemmResult fp8_gemm_check_reference(const Fp8Rows& a, const Fp8Tiles& w, const std::vector<float>& bias,
                                       const std::string& act, const std::vector<int64_t>& rows = {});

// The FP8 tensor cores do not accumulate in fp32. mma.sync ... .f32.e4m3.e4m3.f32
// keeps 13 mantissa bits in its accumulator (SageAttention2, Zhang et al.
// 2024, arXiv:2411.10958 §4: "FP22"); DeepSeek-V3's report (arXiv:2412.19437
// §3.3.2) found about 14 bits on H800. So the kernel promotes each block of
// 128 products to fp32, and its check models one mma step (the running sum C
// plus `step` exact products) as: every addend aligned to the largest, M =
// max(|C|, |p_i|), and truncated to 13 fraction bits (each loses < 2^-13·M),
// the sum rounded to 13 fraction bits (< 2^-13·|C'|, C' the new sum). A
// block's sum of products P then differs from the exact one by at most
// kFp8AccumulatorUnit·T_b, T_b = Σ_steps ((step + 1)·M + |C'|), taken as the
// larger of step = 32 (sm_89's QMMA.16832) and 16 (sm_90 has no FP8
// mma.sync: ptxas unpacks the codes to f16 and runs two HMMA.16816). An fp32
// sum in k order (the simple kernel) is far inside it:
// γ_128(2^-24)·Σ|p| < 2^-13·33·max|p|.
inline constexpr double kFp8AccumulatorUnit = 0x1p-13;
// T_b of one block's exact products p[0 .. count), in k order (the exact partial sums stand for the GPU's).
double fp8_tensor_core_bound(const double* p, int64_t count);

// The largest |gpu − reference| allowed for one output element of a format=e4m3
// plan: each block's P within kFp8AccumulatorUnit·T_b (scaled: tc_magnitude),
// then promoted as acc = fma(fl(sA·sW), P, acc), the bias added in float32
// and y written as out_type: w8a8_tolerance's roundings (it counts more than
// this plan makes) of a magnitude grown by P's error, plus P's error itself
// and y's rounding of it (u_out ≤ 2^-8, inside the factor 1 + 2^-7).
double w8a8_fp8_tolerance(double magnitude, double tc_magnitude, double y, int64_t blocks,
                          const std::string& out_type);

}  // namespace qjit::tuner
