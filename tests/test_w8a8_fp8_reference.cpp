// w8a8_gemm's FP8 reference: the e4m3 encoding against every one of its 256
// codes (decode, then encode back; midpoints round to even; saturation;
// subnormals), the block quantizers' scales, and the GEMM reference against a
// float64 dequantize-then-multiply of the same codes.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "tuner/reference/w8a8_fp8.h"

using namespace qjit;
using namespace qjit::tuner;

TEST_CASE("fp8 e4m3: every code decodes and encodes back; hand-checked values", "[w8a8]") {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v)) {
      ++nans;
      CHECK((c & 0x7F) == 0x7F);
      continue;
    }
    INFO("code " << c << " value " << v);
    // -0 keeps its sign bit; every other code is its value's encoding.
    CHECK(e4m3_from_float(v) == c);
  }
  CHECK(nans == 2);
  CHECK(e4m3_to_float(0x7E) == 448.0f);         // largest finite
  CHECK(e4m3_to_float(0x08) == 0x1p-6f);        // smallest normal
  CHECK(e4m3_to_float(0x01) == 0x1p-9f);        // smallest subnormal
  CHECK(e4m3_to_float(0x38) == 1.0f);           // e = 7
  CHECK(e4m3_to_float(0xB9) == -1.125f);
  CHECK(e4m3_from_float(1e9f) == 0x7E);         // saturating
  CHECK(e4m3_from_float(-464.0f) == 0xFE);
  CHECK(e4m3_from_float(NAN) == 0x7F);
  CHECK(e4m3_from_float(0x1p-11f) == 0x00);     // a quarter step: to zero
}

TEST_CASE("fp8 e4m3: midpoints round to the even code, others to the nearest", "[w8a8]") {
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(c)), hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: one more bit than e4m3
    INFO("between codes " << c << " and " << c + 1);
    CHECK(e4m3_from_float(mid) == ((c % 2 == 0) ? c : c + 1));
    CHECK(e4m3_from_float(std::nextafter(mid, lo)) == c);
    CHECK(e4m3_from_float(std::nextafter(mid, hi)) == c + 1);
    CHECK(e4m3_from_float(-std::nextafter(mid, hi)) == (0x80 | (c + 1)));
  }
}

TEST_CASE("fp8 block quantizers: scale = amax / 448, codes within a rounding of x / scale", "[w8a8]") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  const int64_t rows = 3, k = 256, block = 128;
  std::vector<float> x(rows * k);
  for (auto& v : x) v = u(rng);
  std::fill(x.begin() + k, x.begin() + k + block, 0.0f);  // an all-zero block: scale 1, codes 0
  const Fp8Rows a = quantize_fp8_rows(x, rows, k, block);
  CHECK(a.scale[2] == 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k / block; ++b) {
      float amax = 0;
      for (int64_t i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(x[r * k + b * block + i]));
      if (amax == 0) continue;
      CHECK(a.scale[r * 2 + b] == amax / 448.0f);
      for (int64_t i = 0; i < block; ++i) {
        const float v = x[r * k + b * block + i], s = a.scale[r * 2 + b];
        const double back = e4m3_to_float(a.q[r * k + b * block + i]) * static_cast<double>(s);
        CHECK(std::fabs(back - v) <= std::fabs(v) / 16 + 0x1p-10 * s);  // half a step of 3 mantissa bits
      }
    }
  CHECK_THROWS_WITH(quantize_fp8_rows(x, rows, k, 96), Catch::Contains("block 96 does not divide k=256"));
  std::vector<float> w(128 * 256);
  for (auto& v : w) v = 0.1f * u(rng);
  const Fp8Tiles t = quantize_fp8_tiles(w, 128, 256, 128, 128);
  REQUIRE(t.scale.size() == 2);
  CHECK_THROWS_WITH(quantize_fp8_tiles(w, 128, 256, 96, 128), Catch::Contains("block 96 does not divide n=128"));
}

TEST_CASE("fp8 GEMM reference equals a float64 dequantize-then-multiply, with bias and clamp", "[w8a8]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t m = 4, k = 256, n = 64, block = 128;
  std::vector<float> x(m * k), w(n * k), bias(n);
  for (auto& v : x) v = 4 * u(rng);
  for (auto& v : w) v = 0.05f * u(rng);
  for (auto& v : bias) v = u(rng);
  const Fp8Rows a = quantize_fp8_rows(x, m, k, block);
  const Fp8Tiles t = quantize_fp8_tiles(w, n, k, 32, block);
  for (const char* act : {"none", "relu6"}) {
    const auto y = fp8_gemm_reference(a, t, bias, act);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double want = bias[c];
        for (int64_t i = 0; i < k; ++i)
          want += static_cast<double>(e4m3_to_float(a.q[r * k + i])) * a.scale[r * 2 + i / block] *
                  e4m3_to_float(t.q[c * k + i]) * t.scale[(c / 32) * 2 + i / block];
        if (std::string(act) == "relu6") want = std::fmin(std::fmax(want, 0.0), 6.0);
        INFO(act << " y[" << r << "][" << c << "]");
        CHECK(y[r * n + c] == Approx(want).epsilon(1e-12).margin(1e-12));
      }
  }
  CHECK_THROWS_WITH(fp8_gemm_reference(a, quantize_fp8_tiles(w, n, k, 32, 64), bias, "none"), Catch::Contains("block_k 64"));
  CHECK_THROWS_WITH(fp8_gemm_reference(a, t, bias, "gelu"), Catch::Contains("gelu"));
}
