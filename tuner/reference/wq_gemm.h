// wq_gemm's CPU side: qjit's native weight layout (packer, unpacker, repack
// from awq/gptq) and the float64 reference of Y = X·Wᵀ + bias, clamped.
//
// Weights are PlainQuant (awq_dequant.h): q[k][n], groups of g along k.
// Zero modes (kernel and reference agree):
//   sym:   w = (q - 2^(b-1)) · s
//   int:   w = (q - z) · s,             z[k/g][n] one byte each
//   float: w = (q - 2^(b-1)) · s + o,   o[k/g][n] in the scales' type
//          (seed 002's form: its int4 is the nibble minus 8, its int8 signed)
//
// Native layout, b ∈ {2, 3, 4, 8}; N % 16 == 0, K % 64 == 0. Made for
// mma.m16n8k16 with W as the A operand (16 rows of n × 16 of k): one lane's
// words dequantise straight into its A fragments, no shuffles, no shared memory.
//   Tiles: 16 rows (n) × 64 k; tile (nt, kc) is number nt·(K/64) + kc, so a
//   warp walking along k reads consecutive tiles. A tile is 32 lanes × b words.
//   Lane l (gq = l/4, t = l%4) holds 16 registers R = 0..15 of two values
//   (lo, hi). Register R: step s = R/4, r = R%4 (a0..a3 of the step's mma),
//     row n = 16·nt + gq + 8·(r%2)
//     k     = 64·kc + 16·t + 2·s + 8·(r/2) + (0 for lo, 1 for hi).
//   So lane (gq, t) holds k 16t .. 16t + 15 of its two rows, and its step s
//   the k pairs 16t + 2s and 16t + 2s + 8. (A dot product does not care in
//   which order k is summed: a kernel pairs each A register with x at the
//   same k. The small-M kernels load the lane's 16 contiguous values of x and
//   multiply its k pairs 2s and 2s + 1 in step s, from the registers that
//   hold them: a_reg in templates/wq_gemm/wq_dequant.cuh. PTX ISA
//   "mma.m16n8k16" fragments.) Why this order and not 16t + 4s + 2·(r/2):
//   word s (b = 4) of lane (gq, S) then holds, for step t' = t of lane
//   (gq, t'), exactly mma's A fragment in natural k order (k 16S + 2t' + e
//   and 16S + 2t' + 8 + e), so one ldmatrix.x4 gives lane (gq, t) the natural
//   fragments of all 4 steps (word t of lanes (gq, 0..3)): the wgmma kernel,
//   which must read x in natural order, needs no exchange between lanes.
//   Fields in a word, b ∈ {1, 2, 4, 8}: P = 16/b registers per word; field i
//   (bits b·i ..) of word w is lo of register P·w + i, field i + P its hi. So
//   (word >> b·i) & (2^b - 1)·0x00010001 puts lo and hi of one register in the
//   two 16-bit halves, ready for the 0x6400 magic (fp16 1024 + q).
//   b = 3 is a 2-bit plane (2 words, the b = 2 rule, low bits) followed by a
//   1-bit plane (1 word, the b = 1 rule: bit 2 of each value).
//   The lane's word j lies at word tile·32b + ((j/V)·32 + slot)·V + j%V, V =
//   the vector width in words (4 for b = 4, 8; 2 for b = 2; 1 for b = 3),
//   slot = l ^ ((l/8) % 4): each load instruction of a warp reads 32·4V
//   contiguous bytes. The slot's XOR keeps both reads of a tile in shared
//   memory free of bank conflicts: a lane's own 16-byte vector (lanes 8i ..
//   8i + 7 read 8 distinct 16-byte bank groups), and ldmatrix's rows, where
//   matrix S reads the vectors of lanes (gq, S), gq = 0..7 (without the XOR
//   they would fall in 2 bank groups).
//   scales, offsets: [K/g][N] of the scales' type; zeros: [K/g][N] bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "codegen/spec.h"
#include "tuner/reference/awq_dequant.h"

namespace qjit::tuner {

// Words per lane and per load of the native layout for b bits.
int native_vector_words(int bits);
std::vector<uint32_t> pack_native(const PlainQuant& p);
std::vector<uint8_t> unpack_native(const std::vector<uint32_t>& w, int64_t k, int64_t n, int bits);

// awq/gptq (4-bit) packed tensors → PlainQuant q and z (scales unchanged).
// Throws qjit::Error("argument", ...) when a size does not match.
PlainQuant unpack_awq(const std::vector<uint32_t>& qweight, const std::vector<uint32_t>& qzeros, int64_t k, int64_t n,
                      int64_t g);
PlainQuant unpack_gptq(const std::vector<uint32_t>& qweight, const std::vector<uint32_t>& qzeros, int64_t k, int64_t n,
                       int64_t g, bool symmetric);

// Random weights as a trained model might have them: q uniform over the
// b-bit range, z over 0..2^b (2^b: a GPTQ v1 zero of 16) or 0..255 (8 bits), scales so that |w| ~ 2/√k (dot products O(1)) rounded to
// `scales_type`, offsets a quarter of that. Deterministic in `seed`.
PlainQuant random_quant(int64_t k, int64_t n, int64_t g, int bits, const std::string& scales_type, uint64_t seed);
// The kernel's zeros tensor for `zero` mode: the zero bytes (int), the offsets'
// 16-bit patterns (float), or nothing (sym).
std::vector<uint8_t> zeros_tensor(const PlainQuant& p, const std::string& zero);

// The dequantised weight w[k][n] of `zero` mode as a double (exact: no rounding).
double dequant_exact(const PlainQuant& p, const std::string& zero, const std::string& scales_type, int64_t k, int64_t n);
// The dense W[n][k] rounded once to the scales' type (the cuBLAS baseline's weights).
std::vector<uint16_t> dequant_dense_nk(const PlainQuant& p, const std::string& zero, const std::string& scales_type);

// Y[m][n] = clamp(Σ_k x[m][k]·w[k][n] + bias[n]) in float64, for the rows m
// listed (large M is verified on a sample of rows); result [rows.size()][n].
// x: raw bytes of spec's type "x", [M][k]; bias: raw bytes of the same type,
// [n], or null. Threads over n.
std::vector<double> wq_gemm_reference(const codegen::OpSpec& spec, const std::vector<int64_t>& rows, const uint8_t* x,
                                      const PlainQuant& p, const uint8_t* bias);

}  // namespace qjit::tuner
