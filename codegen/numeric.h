// Host-side fp16 / bf16 conversions, bit-exact with the GPU's cvt.rn
// (round to nearest, ties to even; NaN stays NaN; overflow → ±inf).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace qjit {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000 | (man << 13));  // inf / NaN
  if (exp == 0) {                                                          // zero / subnormal: man * 2^-24
    float f = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;   // NaN
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65520: inf
  if (abs < 0x38800000) {                       // below the smallest normal 2^-14: subnormal or zero
    // Value in units of 2^-24, rounded half to even.
    const uint32_t man = (abs & 0x7fffff) | 0x800000;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 2^(e-127) * 1.m / 2^-24
    if (shift > 24) return sign;
    const uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    return sign | static_cast<uint16_t>(q + (rem > half || (rem == half && (q & 1))));
  }
  // Normal: drop 13 mantissa bits with round half to even; a carry bumps the exponent correctly.
  const uint32_t r = abs - 0x38000000;  // rebias exponent 127 -> 15
  const uint32_t q = r >> 13, rem = r & 0x1fff;
  return sign | static_cast<uint16_t>(q + (rem > 0x1000 || (rem == 0x1000 && (q & 1))));
}

inline float bf16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fff + ((u >> 16) & 1);  // half to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// Element i of a host buffer of `type` ("fp16", "bf16", "fp32"), widened.
inline double element_to_double(const std::string& type, const void* base, size_t i) {
  if (type == "fp32") {
    float f;
    std::memcpy(&f, static_cast<const uint8_t*>(base) + 4 * i, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, static_cast<const uint8_t*>(base) + 2 * i, 2);
  return type == "fp16" ? half_to_float(b) : bf16_to_float(b);
}

}  // namespace qjit
