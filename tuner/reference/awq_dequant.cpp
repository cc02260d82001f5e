#include "tuner/reference/awq_dequant.h"
#include "codegen/numeric.h"

namespace qjit::tuner {

std::vector<uint32_t> pack_along_n(const std::vector<uint8_t>& v, int64_t rows, int64_t n, bool interleaved) {
  std::vector<uint32_t> out(rows * (n / 8), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n / 8; ++c)
      for (int i = 0; i < 8; ++i) {
        const int64_t col = 8 * c + (interleaved ? kAwqOrder[i] : i);
        out[r * (n / 8) + c] |= static_cast<uint32_t>(v[r * n + col] & 0xf) << (4 * i);
      }
  return out;
}

std::vector<uint8_t> unpack_along_n(const std::vector<uint32_t>& w, int64_t rows, int64_t n, bool interleaved) {
  std::vector<uint8_t> v(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n / 8; ++c)
      for (int i = 0; i < 8; ++i)
        v[r * n + 8 * c + (interleaved ? kAwqOrder[i] : i)] = (w[r * (n / 8) + c] >> (4 * i)) & 0xf;
  return v;
}

std::vector<uint32_t> pack_awq_qweight(const PlainQuant& p) { return pack_along_n(p.q, p.k, p.n, true); }
std::vector<uint8_t> unpack_awq_qweight(const std::vector<uint32_t>& w, int64_t k, int64_t n) {
  return unpack_along_n(w, k, n, true);
}

std::vector<uint32_t> pack_gptq_qweight(const PlainQuant& p) {
  std::vector<uint32_t> out((p.k / 8) * p.n, 0);
  for (int64_t r = 0; r < p.k / 8; ++r)
    for (int64_t col = 0; col < p.n; ++col)
      for (int i = 0; i < 8; ++i)
        out[r * p.n + col] |= static_cast<uint32_t>(p.q[(8 * r + i) * p.n + col] & 0xf) << (4 * i);
  return out;
}

std::vector<uint8_t> unpack_gptq_qweight(const std::vector<uint32_t>& w, int64_t k, int64_t n) {
  std::vector<uint8_t> q(k * n);
  for (int64_t r = 0; r < k / 8; ++r)
    for (int64_t col = 0; col < n; ++col)
      for (int i = 0; i < 8; ++i) q[(8 * r + i) * n + col] = (w[r * n + col] >> (4 * i)) & 0xf;
  return q;
}

std::vector<uint16_t> dequant_reference(const PlainQuant& p, bool symmetric, const std::string& scales_type,
                                        const std::string& out_type) {
  std::vector<uint16_t> out(p.k * p.n);
  const bool bf16 = scales_type == "bf16";
  const bool out_bf16 = out_type == "scales" || out_type.empty() ? bf16 : out_type == "bf16";
  for (int64_t k = 0; k < p.k; ++k)
    for (int64_t n = 0; n < p.n; ++n) {
      const int64_t grp = (k / p.g) * p.n + n;
      const int z = symmetric ? 8 : p.z[grp];
      const float s = bf16 ? bf16_to_float(p.s[grp]) : half_to_float(p.s[grp]);
      // (q - z) is exact and so is its product with a 16-bit scale in fp32: one rounding, at the end.
      const float v = static_cast<float>(static_cast<int>(p.q[k * p.n + n]) - z) * s;
      out[k * p.n + n] = out_bf16 ? float_to_bf16(v) : float_to_half(v);
    }
  return out;
}

}  // namespace qjit::tuner
