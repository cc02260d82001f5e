#include "tuner/reference/fp_lut.h"
#include <cmath>
#include "codegen/numeric.h"

namespace qjit::tuner {

namespace lut = codegen::lut;

float lut_lookup(const lut::Table& t, float x) {
  constexpr float kTwoPi = 6.28318530717958647692f, kPi = 3.14159265358979323846f;
  if (lut::reduces_angle(t.fn)) {
    x = std::fmod(x, kTwoPi);
    if (x > kPi) x -= kTwoPi;
    else if (x < -kPi) x += kTwoPi;
  }
  if (std::isnan(x)) return x;
  x = std::fmin(std::fmax(x, t.cuts[0]), t.cuts[10]);
  const float xh = half_to_float(float_to_half(x));
  auto entry = [&](int i) { return half_to_float(t.values[i]); };
  if (xh <= t.cuts[0]) return entry(0);
  if (xh >= t.cuts[10]) return entry(258);
  int i = 0;
  for (int k = 1; k < 10; ++k)
    if (xh >= t.cuts[k]) i = k;
  const float p = (xh - t.cuts[i]) * t.scales[i];
  const float j = std::fmin(std::fmax(std::floor(p), 0.0f), static_cast<float>(lut::kLen[i]));
  const int lo = static_cast<int>(j), hi = std::min(lo + 1, lut::kLen[i]);
  const float alpha = std::fmin(std::fmax(p - j, 0.0f), 1.0f);
  const float t0 = entry(lut::kPre[i] + lo), t1 = entry(lut::kPre[i] + hi);
  return std::fma(t1 - t0, alpha, t0);
}

float lut_apply(const lut::Table& t, float x) {
  const float y = lut_lookup(t, x);
  return std::isnan(y) ? y : std::fmin(std::fmax(y, -65504.0f), 65504.0f);
}

uint32_t lut_reference_bits(const lut::Table& t, const std::string& in, const std::string& out, uint32_t x_bits) {
  const float x = in == "fp32"   ? bits_to_float(x_bits)
                  : in == "bf16" ? bf16_to_float(static_cast<uint16_t>(x_bits))
                                 : half_to_float(static_cast<uint16_t>(x_bits));
  const float y = lut_apply(t, x);
  if (out == "fp32") return float_to_bits(y);
  return out == "bf16" ? float_to_bf16(y) : float_to_half(y);
}

}  // namespace qjit::tuner
