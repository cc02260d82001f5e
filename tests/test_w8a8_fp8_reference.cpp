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

namespace {

// One mma step as fp8_tensor_core_bound models the FP8 tensor cores: the
// running sum c and the products aligned to the largest magnitude M and
// truncated to 13 fraction bits below M's leading bit, summed, the sum
// truncated the same way.
double model_step(double c, const double* p, int count) {
  double big = std::fabs(c);
  for (int i = 0; i < count; ++i) big = std::fmax(big, std::fabs(p[i]));
  if (big == 0) return 0;
  const double unit = std::ldexp(1.0, std::ilogb(big) - 13);
  auto cut = [&](double v) { return std::trunc(v / unit) * unit; };
  double s = cut(c);
  for (int i = 0; i < count; ++i) s += cut(p[i]);
  const double out_unit = s == 0 ? unit : std::ldexp(1.0, std::ilogb(s) - 13);
  return std::trunc(s / out_unit) * out_unit;
}

}  // namespace

TEST_CASE("fp8 tensor-core bound: hand-computed, and it holds for the model and for an fp32 sum", "[w8a8]") {
  // 32 products of 1: k32 steps give 33·1 + 32; k16 halves 17·1 + 16, then 17·16 + 32.
  std::vector<double> ones(32, 1.0);
  CHECK(fp8_tensor_core_bound(ones.data(), 32) == 337.0);
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    // 128 products of two e4m3 codes; a third of the blocks one-signed (sums grow, the worst case).
    std::vector<double> p(128);
    for (auto& v : p) {
      v = static_cast<double>(e4m3_to_float(static_cast<uint8_t>(rng() % 0x7F))) *
          e4m3_to_float(static_cast<uint8_t>(rng() % 0x7F));
      if (trial % 3 && rng() % 2) v = -v;
    }
    const double bound = kFp8AccumulatorUnit * fp8_tensor_core_bound(p.data(), 128);
    double exact = 0, k32 = 0, k16 = 0;
    float f32 = 0;
    for (int s = 0; s < 128; s += 32) k32 = model_step(k32, p.data() + s, 32);
    for (int s = 0; s < 128; s += 16) k16 = model_step(k16, p.data() + s, 16);
    for (double v : p) exact += v, f32 += static_cast<float>(v);
    INFO("trial " << trial);
    CHECK(std::fabs(k32 - exact) <= bound);
    CHECK(std::fabs(k16 - exact) <= bound);
    CHECK(std::fabs(f32 - exact) <= bound);
  }
}

TEST_CASE("w8a8_fp8_tolerance passes the GPU's roundings and fails a wrong scale or k order", "[w8a8]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t m = 3, k = 512, n = 256, block = 128, blocks = k / block;
  std::vector<float> x(m * k), w(n * k), bias(n);
  for (int64_t i = 0; i < m * k; ++i) x[i] = std::ldexp(u(rng), static_cast<int>((i / block) % 5) - 2);
  for (int64_t i = 0; i < n * k; ++i) w[i] = std::ldexp(0.05f * u(rng), static_cast<int>((i / k / 128 + i % k / block) % 3));
  for (auto& v : bias) v = u(rng);
  const Fp8Rows a = quantize_fp8_rows(x, m, k, block);
  const Fp8Tiles t = quantize_fp8_tiles(w, n, k, 128, block);
  const Fp8GemmResult ref = fp8_gemm_check_reference(a, t, bias, "none");
  CHECK(ref.y == fp8_gemm_reference(a, t, bias, "none"));
  // The plan's arithmetic in float: the model's k32 steps, the promotion fma(sA·sW, P, acc), the bias.
  // Against it, the same with W's tile scales swapped, and with A's codes of each k32 step reversed.
  int64_t wrong_scale = 0, wrong_order = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float acc[3] = {0, 0, 0};
      for (int64_t b = 0; b < blocks; ++b) {
        double p[3][128];
        for (int64_t i = 0; i < block; ++i) {
          const double wv = e4m3_to_float(t.q[c * k + b * block + i]);
          p[0][i] = p[1][i] = e4m3_to_float(a.q[r * k + b * block + i]) * wv;
          p[2][i] = e4m3_to_float(a.q[r * k + b * block + (i / 32) * 32 + 31 - i % 32]) * wv;
        }
        for (int v = 0; v < 3; ++v) {
          double part = 0;
          for (int s = 0; s < block; s += 32) part = model_step(part, p[v] + s, 32);
          const float sw = t.scale[((v == 1 ? 1 - c / 128 : c / 128)) * blocks + b];
          acc[v] = std::fma(a.scale[r * blocks + b] * sw, static_cast<float>(part), acc[v]);
        }
      }
      const size_t i = static_cast<size_t>(r * n + c);
      const double tol = w8a8_fp8_tolerance(ref.magnitude[i], ref.tc_magnitude[i], ref.y[i], blocks, "fp32");
      INFO("y[" << r << "][" << c << "] = " << ref.y[i] << " tolerance " << tol);
      const double gpu = static_cast<double>(static_cast<float>(acc[0] + bias[c]));
      CHECK(std::fabs(gpu - ref.y[i]) <= tol);
      wrong_scale += std::fabs(acc[1] + bias[c] - ref.y[i]) > tol;
      wrong_order += std::fabs(acc[2] + bias[c] - ref.y[i]) > tol;
    }
  CHECK(wrong_scale > m * n * 9 / 10);
  CHECK(wrong_order > m * n * 9 / 10);
}
