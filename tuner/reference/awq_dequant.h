// Reference packers and dequantisation for 4-bit group-quantized weights.
// Written from the layout descriptions (the AWQ order is a fact
// of the AWQ project's packer, ../shared/seeds/001_* describes the kernel):
//
//   plain: q[k][n], z[k/g][n] in 0..15, s[k/g][n]; w[k][n] = (q - z) * s.
//   awq:   qweight int32 [K, N/8]: nibble i (bits 4i..4i+3) of word (k, c)
//          holds q[k][8c + kAwqOrder[i]], kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7};
//          qzeros int32 [K/g, N/8] packed the same way from z.
//   gptq:  qweight int32 [K/8, N]: nibble i of word (r, n) holds q[8r + i][n];
//          qzeros int32 [K/g, N/8]: nibble i of word (grp, c) holds
//          z[grp][8c + i] (plain order); symmetric variant: every zero is 8.
//   scales [K/g, N] (fp16 or bf16 bits), also the result type.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qjit::tuner {

inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// Group-quantized weights before packing. awq/gptq are 4-bit; wq_gemm's
// native layout (tuner/reference/wq_gemm.h) takes bits 2, 3, 4 and 8.
struct PlainQuant {
  int64_t k = 0, n = 0, g = 0;
  int bits = 4;
  std::vector<uint8_t> q;       // [k][n], 0 .. 2^bits - 1
  std::vector<uint8_t> z;       // [k/g][n], 0 .. 2^bits - 1 (integer zero points)
  std::vector<uint16_t> s;      // [k/g][n], fp16 or bf16 bits
  std::vector<uint16_t> o;      // [k/g][n], offsets of the float form w = (q - 2^(bits-1))·s + o
};

std::vector<uint32_t> pack_awq_qweight(const PlainQuant& p);
std::vector<uint32_t> pack_gptq_qweight(const PlainQuant& p);
// Packs [rows][n] nibbles along n: interleaved (AWQ order) or plain (GPTQ zeros).
std::vector<uint32_t> pack_along_n(const std::vector<uint8_t>& v, int64_t rows, int64_t n, bool interleaved);
// Inverses, for round-trip tests.
std::vector<uint8_t> unpack_awq_qweight(const std::vector<uint32_t>& w, int64_t k, int64_t n);
std::vector<uint8_t> unpack_gptq_qweight(const std::vector<uint32_t>& w, int64_t k, int64_t n);
std::vector<uint8_t> unpack_along_n(const std::vector<uint32_t>& w, int64_t rows, int64_t n, bool interleaved);

// w[k][n] = round_to(out_type)((q - z) * s), as 16-bit patterns; z = 8 when symmetric.
// out_type "fp16" or "bf16"; "scales" (or empty): the scales' type.
std::vector<uint16_t> dequant_reference(const PlainQuant& p, bool symmetric, const std::string& scales_type,
                                        const std::string& out_type = "scales");

}  // namespace qjit::tuner
