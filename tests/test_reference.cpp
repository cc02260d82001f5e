// Tests for codegen/numeric.h (host fp16/bf16 conversions, which must match the
// GPU's cvt.rn bit for bit) and tuner/reference/fused_ffn.* (the CPU reference
// every kernel is verified against).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codegen/spec.h"
#include "codegen/numeric.h"
#include "tuner/reference/fused_ffn.h"

using namespace qjit;
using namespace qjit::tuner;
using qjit::codegen::OpSpec;
using qjit::codegen::parse_spec;

namespace {

// fp16 bits -> value, written from the IEEE definition (independent of numeric.h).
double half_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0x1f) v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(man, -24);
  else v = std::ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}

bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f); }

// Round-to-nearest-even of a finite, non-NaN float to fp16, by comparing the
// distances to the two neighbouring fp16 values (the obvious definition).
uint16_t half_round_ref(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;  // 65504 + half an ulp (16) rounds to inf
  // largest positive fp16 <= a (binary search over the monotone bit patterns 0..0x7bff)
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {
    uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (half_value(mid) <= a) lo = mid;
    else hi = static_cast<uint16_t>(mid - 1);
  }
  if (half_value(lo) == a || lo == 0x7bff) return sign | lo;
  const uint16_t up = static_cast<uint16_t>(lo + 1);
  const double dlo = a - half_value(lo), dup = half_value(up) - a;
  if (dlo < dup) return sign | lo;
  if (dup < dlo) return sign | up;
  return sign | ((lo & 1) ? up : lo);
}

uint32_t bits(float f) { return float_to_bits(f); }

// Round-to-nearest-even of a non-NaN float to bf16 from the two neighbours.
uint16_t bf16_round_ref(float f) {
  const uint32_t u = bits(f), mag = u & 0x7fffffff, sign = u & 0x80000000;
  if (mag >= 0x7f800000) return static_cast<uint16_t>((sign | 0x7f800000) >> 16);
  const uint32_t lo = mag & 0xffff0000, up = lo + 0x10000;
  auto value = [](uint32_t m) {  // exponent 255 read as 2^128 (the "next" value past the largest finite)
    if (m == 0x7f800000) return std::ldexp(1.0, 128);
    return static_cast<double>(bits_to_float(m));
  };
  const double a = bits_to_float(mag), dlo = a - value(lo), dup = value(up) - a;
  uint32_t pick = dlo < dup ? lo : dup < dlo ? up : ((lo >> 16) & 1 ? up : lo);
  return static_cast<uint16_t>((sign | pick) >> 16);
}

float f(double v) { return static_cast<float>(v); }

}  // namespace

TEST_CASE("fp16: every bit pattern converts exactly and round trips", "[reference]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float v = half_to_float(h);
    INFO("bits 0x" << std::hex << i);
    if (half_is_nan(h)) {
      CHECK(std::isnan(v));
      const uint16_t back = float_to_half(v);
      CHECK(half_is_nan(back));
      CHECK((back & 0x8000) == (h & 0x8000));
      continue;
    }
    CHECK(static_cast<double>(v) == half_value(h));
    CHECK(std::signbit(v) == bool(h & 0x8000));
    CHECK(float_to_half(v) == h);
  }
}

TEST_CASE("fp16: rounding to nearest, ties to even, overflow and subnormals", "[reference]") {
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(f(1 + std::ldexp(1, -11))) == 0x3c00);      // tie between 1 and 1+2^-10 -> even (1)
  CHECK(float_to_half(f(1 + 3 * std::ldexp(1, -11))) == 0x3c02);  // tie between 1+2^-10 and 1+2^-9 -> even (1+2^-9)
  CHECK(float_to_half(f(1 + std::ldexp(1, -11) + std::ldexp(1, -20))) == 0x3c01);  // just above the tie
  CHECK(float_to_half(f(1 + std::ldexp(1, -11) - std::ldexp(1, -20))) == 0x3c00);  // just below it
  CHECK(float_to_half(f(2049)) == 0x6800);  // 2048 + 1: tie, 2048 is even
  CHECK(float_to_half(f(2051)) == 0x6802);  // 2050 + 1: tie, 2052 is even
  CHECK(float_to_half(-1.0f) == 0xbc00);
  CHECK(float_to_half(0.0f) == 0x0000);
  CHECK(float_to_half(-0.0f) == 0x8000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(65519.99f) == 0x7bff);
  CHECK(float_to_half(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(float_to_half(65520.0f) == 0x7c00);  // the tie at max + half ulp goes to "even" inf
  CHECK(float_to_half(-65520.0f) == 0xfc00);
  CHECK(float_to_half(1e10f) == 0x7c00);
  CHECK(float_to_half(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(float_to_half(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(float_to_half(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(half_is_nan(float_to_half(std::numeric_limits<float>::quiet_NaN())));
  CHECK(half_is_nan(float_to_half(bits_to_float(0x7f800001))));  // signalling NaN with a low payload stays NaN
  // subnormals
  CHECK(float_to_half(f(std::ldexp(1, -24))) == 0x0001);
  CHECK(float_to_half(f(std::ldexp(1, -25))) == 0x0000);  // half of the smallest subnormal: tie -> 0
  CHECK(float_to_half(std::nextafter(f(std::ldexp(1, -25)), 1.0f)) == 0x0001);
  CHECK(float_to_half(f(3 * std::ldexp(1, -25))) == 0x0002);  // 1.5 units: tie -> 2
  CHECK(float_to_half(f(5 * std::ldexp(1, -25))) == 0x0002);  // 2.5 units: tie -> 2
  CHECK(float_to_half(f(-3 * std::ldexp(1, -25))) == 0x8002);
  CHECK(float_to_half(f(std::ldexp(1, -26))) == 0x0000);
  CHECK(float_to_half(f(-std::ldexp(1, -26))) == 0x8000);
  CHECK(float_to_half(f(std::ldexp(1, -14))) == 0x0400);                         // smallest normal
  CHECK(float_to_half(f(std::ldexp(1, -14) - std::ldexp(1, -25))) == 0x0400);    // 1023.5 units: tie -> 1024
  CHECK(float_to_half(f(std::ldexp(1, -14) - 3 * std::ldexp(1, -25))) == 0x03fe);  // 1022.5 units: tie -> 1022
  CHECK(float_to_half(std::numeric_limits<float>::denorm_min()) == 0x0000);
}

TEST_CASE("fp16: float_to_half equals nearest-even on random floats", "[reference]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> exp_dist(-27, 17);
  for (int i = 0; i < 200000; ++i) {
    float x;
    if (i % 2) {
      x = bits_to_float(static_cast<uint32_t>(rng()));
      if (std::isnan(x)) continue;
    } else {
      // log-uniform over the fp16 range, both signs, incl. exact halves and ties
      x = f(std::exp2(exp_dist(rng)) * (rng() % 2 ? -1 : 1));
      if (i % 10 == 0) {
        const uint16_t h = static_cast<uint16_t>(rng() % 0x7bff);
        x = f((half_value(h) + half_value(static_cast<uint16_t>(h + 1))) / 2);  // exact tie
      }
    }
    INFO("x bits 0x" << std::hex << bits(x));
    REQUIRE(float_to_half(x) == half_round_ref(x));
  }
}

TEST_CASE("bf16: round trip, ties to even, overflow, NaN", "[reference]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float v = bf16_to_float(b);
    INFO("bits 0x" << std::hex << i);
    CHECK(bits(v) == (i << 16));
    if (bf16_is_nan(b)) {
      CHECK(bf16_is_nan(float_to_bf16(v)));
      CHECK((float_to_bf16(v) & 0x8000) == (b & 0x8000));
    } else {
      CHECK(float_to_bf16(v) == b);
    }
  }
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(f(1 + std::ldexp(1, -8))) == 0x3f80);      // tie -> even
  CHECK(float_to_bf16(f(1 + 3 * std::ldexp(1, -8))) == 0x3f82);  // tie -> even
  CHECK(float_to_bf16(f(1 + std::ldexp(1, -8) + std::ldexp(1, -20))) == 0x3f81);
  CHECK(float_to_bf16(-2.0f) == 0xc000);
  CHECK(float_to_bf16(bits_to_float(0x7f7f7fff)) == 0x7f7f);  // below the tie at the top: stays finite
  CHECK(float_to_bf16(bits_to_float(0x7f7f8000)) == 0x7f80);  // tie past the largest bf16: inf
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::max()) == 0xff80);
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(float_to_bf16(bits_to_float(0x00008000)) == 0x0000);  // subnormal tie -> even 0
  CHECK(float_to_bf16(bits_to_float(0x00018000)) == 0x0002);  // subnormal tie -> even 2
  CHECK(bf16_is_nan(float_to_bf16(bits_to_float(0x7f800001))));  // NaN whose payload is only in the low bits
  CHECK(bf16_is_nan(float_to_bf16(bits_to_float(0xff800001))));
  CHECK((float_to_bf16(bits_to_float(0xff800001)) & 0x8000) == 0x8000);

  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (i % 4 == 0) u = (u & 0xffff0000) | 0x8000;  // exact ties
    const float x = bits_to_float(u);
    if (std::isnan(x)) continue;
    INFO("x bits 0x" << std::hex << u);
    REQUIRE(float_to_bf16(x) == bf16_round_ref(x));
  }
}

TEST_CASE("fused_ffn_reference: hand-computed fp32 cases", "[reference]") {
  // d=2, h=2, m=1. x = [1, 2].
  // row 0: g = 0.5*1 + 0.25*2 = 1,  u = 2*1 + 1*2 = 4  -> SiLU(1)*4 = 4/(1+e^-1)
  // row 1: g = 1*1 - 0.5*2   = 0,  u = 3*1 + 3*2 = 9  -> SiLU(0)*9 = 0
  {
    const OpSpec spec = parse_spec("fused_ffn", "d=2,h=2,m=1,dtype=fp32");
    const float x[] = {1, 2}, w1[] = {0.5f, 0.25f, 1, -0.5f}, w3[] = {2, 1, 3, 3};
    const auto y = fused_ffn_reference(spec, x, w1, w3, 1);
    REQUIRE(y.size() == 2);
    CHECK(y[0] == Approx(2.9242343145200195).epsilon(1e-14));
    CHECK(y[1] == 0.0);
  }
  // d=2, h=3, m=2; y is [m, h] row-major.
  // x0 = [1, -1], x1 = [2, 0]
  // W1 rows: [1, 3] [0, 1] [1, 1];  W3 rows: [1, 0] [2, 2] [-1, 4]
  // m=0: g = [-2, -1, 0], u = [1, 0, -5]  -> [SiLU(-2), 0 (u=0), 0 (g=0)]
  // m=1: g = [ 2,  0, 2], u = [2, 4, -2] -> [2*SiLU(2), 0, -2*SiLU(2)]
  {
    const OpSpec spec = parse_spec("fused_ffn", "d=2,h=3,m=2,dtype=fp32");
    const float x[] = {1, -1, 2, 0}, w1[] = {1, 3, 0, 1, 1, 1}, w3[] = {1, 0, 2, 2, -1, 4};
    const auto y = fused_ffn_reference(spec, x, w1, w3, 2);
    REQUIRE(y.size() == 6);
    const double silu_m2 = -0.23840584404423515;  // -2 / (1 + e^2)
    const double silu_2 = 1.7615941559557649;     //  2 / (1 + e^-2)
    CHECK(y[0] == Approx(silu_m2).epsilon(1e-14));
    CHECK(y[1] == 0.0);
    CHECK(y[2] == 0.0);
    CHECK(y[3] == Approx(2 * silu_2).epsilon(1e-14));
    CHECK(y[4] == 0.0);
    CHECK(y[5] == Approx(-2 * silu_2).epsilon(1e-14));
  }
  // fp16 with values exact in half: x = [0.5, -1.5], W1 = [2, 1], W3 = [1, 1] -> g = -0.5, u = -1
  {
    const OpSpec spec = parse_spec("fused_ffn", "d=2,h=1,dtype=fp16");
    const uint16_t x[] = {0x3800, 0xbe00}, w1[] = {0x4000, 0x3c00}, w3[] = {0x3c00, 0x3c00};
    const auto y = fused_ffn_reference(spec, x, w1, w3);
    REQUIRE(y.size() == 1);
    CHECK(y[0] == Approx(0.5 / (1 + std::exp(0.5))).epsilon(1e-14));  // -SiLU(-0.5)
  }
}

TEST_CASE("fused_ffn_reference: random small shapes vs a direct double computation", "[reference]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1, 1);
  for (const std::string dtype : {"fp16", "bf16", "fp32", "mixed"}) {
    for (int64_t m = 1; m <= 8; ++m) {
      const int64_t d = 1 + rng() % 200, h = 1 + rng() % 40;
      const OpSpec spec = parse_spec("fused_ffn", "d=" + std::to_string(d) + ",h=" + std::to_string(h) +
                                                      ",m=" + std::to_string(m) + ",dtype=" + dtype);
      INFO(spec.label());
      // storage in the spec's types; values kept as doubles decoded independently
      const bool x16 = dtype == "fp16" || dtype == "bf16", w16 = dtype != "fp32";
      auto draw = [&](int64_t n, bool is16, std::vector<uint16_t>& b16, std::vector<float>& b32,
                      std::vector<double>& val) {
        for (int64_t i = 0; i < n; ++i) {
          const float v = uni(rng);
          if (!is16) {
            b32.push_back(v);
            val.push_back(v);
          } else if (dtype == "bf16") {
            const uint16_t b = float_to_bf16(v);
            b16.push_back(b);
            val.push_back(bits_to_float(static_cast<uint32_t>(b) << 16));
          } else {
            const uint16_t b = float_to_half(v);
            b16.push_back(b);
            val.push_back(half_value(b));
          }
        }
      };
      std::vector<uint16_t> x16b, w1_16, w3_16;
      std::vector<float> x32, w1_32, w3_32;
      std::vector<double> xv, w1v, w3v;
      draw(m * d, x16, x16b, x32, xv);
      draw(h * d, w16, w1_16, w1_32, w1v);
      draw(h * d, w16, w3_16, w3_32, w3v);
      const void* xp = x16 ? static_cast<const void*>(x16b.data()) : x32.data();
      const void* w1p = w16 ? static_cast<const void*>(w1_16.data()) : w1_32.data();
      const void* w3p = w16 ? static_cast<const void*>(w3_16.data()) : w3_32.data();
      const auto y = fused_ffn_reference(spec, xp, w1p, w3p, 3);
      REQUIRE(y.size() == static_cast<size_t>(m * h));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < h; ++r) {
          double g = 0, u = 0, scale = 0;
          for (int64_t k = 0; k < d; ++k) {
            g += w1v[r * d + k] * xv[i * d + k];
            u += w3v[r * d + k] * xv[i * d + k];
            scale += std::fabs(w1v[r * d + k] * xv[i * d + k]) + std::fabs(w3v[r * d + k] * xv[i * d + k]);
          }
          const double expect = g / (1 + std::exp(-g)) * u;
          INFO("y[" << i << ", " << r << "]");
          CHECK(std::fabs(y[i * h + r] - expect) <= 1e-12 * (1 + scale * scale));
        }
      // the thread count does not change a single bit
      CHECK(fused_ffn_reference(spec, xp, w1p, w3p, 1) == y);
      CHECK(fused_ffn_reference(spec, xp, w1p, w3p, 64) == y);
    }
  }
}

TEST_CASE("fused_ffn_tolerance admits a correctly rounded output", "[reference]") {
  // A kernel whose only error is rounding the exact result to its output type
  // must pass: tolerance >= the relative rounding error of that type.
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0, 3);
  for (const std::string dtype : {"fp16", "bf16", "fp32", "mixed"}) {
    const OpSpec spec = parse_spec("fused_ffn", "d=64,h=4096,dtype=" + dtype);
    const double tol = fused_ffn_tolerance(spec);
    INFO(dtype << " tol " << tol);
    CHECK(tol > 0);
    CHECK(tol < 0.05);
    double num = 0, den = 0;
    for (int i = 0; i < 4096; ++i) {
      const double ref = nd(rng);
      double y = static_cast<float>(ref);
      if (dtype == "fp16") y = half_to_float(float_to_half(static_cast<float>(ref)));
      if (dtype == "bf16") y = bf16_to_float(float_to_bf16(static_cast<float>(ref)));
      num += (y - ref) * (y - ref);
      den += ref * ref;
    }
    CHECK(std::sqrt(num / den) <= tol);
  }
  CHECK(fused_ffn_tolerance(parse_spec("fused_ffn", "d=1,h=1,dtype=bf16")) >
        fused_ffn_tolerance(parse_spec("fused_ffn", "d=1,h=1,dtype=fp16")));
}
