// w8a8_gemm's FP8 variant on the CPU (Hopper's e4m3 tensor cores; the block
// format DeepGEMM uses): the e4m3 encoding, its block quantizers and the
// float64 reference of the block-scaled GEMM. The kernel that will run it is
// not built yet; this is the definition it will be checked against.
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

}  // namespace qjit::tuner
