// w8a8_gemm on the CPU: the seed's QuantA block rule (ties, the degenerate
// branch, the contracted offset), the symmetric rule, weight packing, and the
// float64 GEMM reference against an independent dequantize-then-matmul.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "codegen/error.h"
#include "tests/helpers.h"
#include "tuner/reference/w8a8_gemm.h"
#include "tuner/reference/w8a8_quant.h"

using namespace qjit::tuner;
using qjit::test::error_of;

namespace {

uint64_t fresh_seed() { return (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); }

// A block of values of one of several shapes a model produces: uniform, a few
// outliers, all positive, fp16-representable, or tiny.
std::vector<float> random_block(std::mt19937_64& rng, int64_t count) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int kind = static_cast<int>(rng() % 5);
  const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 16) - 8);
  std::vector<float> x(count);
  for (auto& v : x) v = scale * u(rng);
  if (kind == 1)
    for (int i = 0; i < 3; ++i) x[rng() % count] *= 40.0f;
  if (kind == 2)
    for (auto& v : x) v = std::fabs(v) + scale;
  if (kind == 3)
    for (auto& v : x) v = std::round(v * 1024.0f) / 1024.0f;
  if (kind == 4)
    for (auto& v : x) v *= 1e-30f;
  return x;
}

int32_t sum_of(const std::vector<int8_t>& q) {
  int32_t s = 0;
  for (int8_t v : q) s += v;
  return s;
}

BlockParams quantize(const std::vector<float>& x, BlockRule rule, std::vector<int8_t>& q) {
  q.assign(x.size(), 99);
  return quantize_block(x.data(), static_cast<int64_t>(x.size()), rule, q.data());
}

double round_half_away(double t) { return t < 0 ? -std::floor(-t + 0.5) : std::floor(t + 0.5); }

}  // namespace

TEST_CASE("w8a8 offset rule: min → −128, max → 127, ties round half away from zero (seed's roundf)", "[w8a8]") {
  // max − min = 255 gives scale 1 and offset 127 − 127 = 0: q = roundf(x).
  std::vector<float> x(32, 0.0f);
  x[0] = -128.0f, x[1] = 127.0f, x[2] = 2.5f, x[3] = -2.5f, x[4] = 0.5f, x[5] = -0.5f, x[6] = 1.5f;
  std::vector<int8_t> q;
  BlockParams p = quantize(x, BlockRule::offset, q);
  CHECK(p.scale == 1.0f);
  CHECK(p.offset == 0.0f);
  CHECK(std::vector<int>(q.begin(), q.begin() + 7) == std::vector<int>{-128, 127, 3, -3, 1, -1, 2});
  CHECK(p.sum == sum_of(q));
  CHECK(p.sum == -128 + 127 + 3 - 3 + 1 - 1 + 2);

  // max − min = 127.5: scale 0.5, offset 63.5 − 63.5 = 0; 1.25 / 0.5 = 2.5 → 3.
  std::vector<float> y(64, 0.0f);
  y[0] = -64.0f, y[1] = 63.5f, y[2] = 1.25f, y[3] = -0.75f;
  p = quantize(y, BlockRule::offset, q);
  CHECK(p.scale == 0.5f);
  CHECK(p.offset == 0.0f);
  CHECK(std::vector<int>(q.begin(), q.begin() + 4) == std::vector<int>{-128, 127, 3, -2});
}

TEST_CASE("w8a8 offset rule: constant and near-constant blocks take the |scale| ≤ 1e-5 branch", "[w8a8]") {
  std::vector<int8_t> q;
  BlockParams p = quantize(std::vector<float>(32, 3.0f), BlockRule::offset, q);
  CHECK(p.scale == 1.0f);
  CHECK(p.offset == 3.0f);
  CHECK(p.sum == 0);
  CHECK(std::all_of(q.begin(), q.end(), [](int8_t v) { return v == 0; }));

  // All zeros: the same branch, offset 0.
  p = quantize(std::vector<float>(64, 0.0f), BlockRule::offset, q);
  CHECK((p.scale == 1.0f && p.offset == 0.0f && p.sum == 0));

  // Spread 0.001: scale 3.9e-6 ≤ 1e-5 → scale 1, offset = max; codes round(x − max) = 0.
  std::vector<float> x(32, 1.0f);
  x[7] = 1.001f;
  p = quantize(x, BlockRule::offset, q);
  CHECK(p.scale == 1.0f);
  CHECK(p.offset == 1.001f);
  CHECK(std::all_of(q.begin(), q.end(), [](int8_t v) { return v == 0; }));

  // Spread 255 · 2e-5: scale 2e-5 > 1e-5, the regular branch.
  x.assign(32, 0.0f);
  x[0] = 255 * 2e-5f;
  p = quantize(x, BlockRule::offset, q);
  CHECK(p.scale != 1.0f);
  CHECK((q[0] == 127 && q[1] == -128));

  // scale == float(1e-5) exactly: not above 1e-5, so the degenerate branch.
  float hi = 255 * 1e-5f;
  for (int i = 0; i < 200 && hi / 255.0f < 1e-5f; ++i) hi = std::nextafter(hi, 1.0f);
  for (int i = 0; i < 200 && hi / 255.0f > 1e-5f; ++i) hi = std::nextafter(hi, 0.0f);
  REQUIRE(hi / 255.0f == 1e-5f);
  x.assign(32, 0.0f);
  x[0] = hi;
  p = quantize(x, BlockRule::offset, q);
  CHECK(p.scale == 1.0f);
  CHECK(p.offset == hi);
}

TEST_CASE("w8a8 offset rule: offset = max − 127·scale with one rounding (the seed's contracted FFMA)", "[w8a8]") {
  // A pair found by search where a separate multiply and subtract give
  // 0x1.f60d7p+0 and the fused form 0x1.f60d6ep+0.
  std::vector<float> x(32, 0x1.526b2p+0f);
  x[5] = 0x1.4c343cp+1f;
  std::vector<int8_t> q;
  const BlockParams p = quantize(x, BlockRule::offset, q);
  CHECK(p.scale == 0x1.47449cp-8f);
  CHECK(p.offset == 0x1.f60d6ep+0f);
}

TEST_CASE("w8a8 offset rule agrees with a float64 evaluation of the formula", "[w8a8]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int64_t codes_checked = 0, offsets_checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t count = int64_t{32} << (rng() % 5);
    const std::vector<float> x = random_block(rng, count);
    std::vector<int8_t> q;
    const BlockParams p = quantize(x, BlockRule::offset, q);
    const double lo = *std::min_element(x.begin(), x.end()), hi = *std::max_element(x.begin(), x.end());
    INFO("trial " << trial << " min " << lo << " max " << hi);
    REQUIRE(p.sum == sum_of(q));
    if ((hi - lo) / 255.0 <= 1.0001e-5) continue;  // degenerate: covered above
    // Two float32 roundings (subtract, divide) on the way to the scale.
    CHECK(std::fabs(p.scale - (hi - lo) / 255.0) <= 0x1p-22 * p.scale);
    // The offset is max − 127·scale rounded once, when that double difference is exact.
    const double exact = hi - 127.0 * p.scale;
    if (hi - exact == 127.0 * p.scale) {
      CHECK(p.offset == static_cast<float>(exact));
      ++offsets_checked;
    }
    for (int64_t i = 0; i < count; ++i) {
      const double t = (x[i] - static_cast<double>(p.offset)) / p.scale;
      // float32 arithmetic moves t by at most ~2^-22·|t| ≤ 3.1e-5.
      REQUIRE(t >= -128.5 - 1e-4);
      REQUIRE(t <= 127.5 + 1e-4);
      if (std::fabs(std::fabs(t - std::trunc(t)) - 0.5) < 1e-4) continue;  // too near a tie to call
      REQUIRE(q[i] == std::clamp(round_half_away(t), -128.0, 127.0));
      ++codes_checked;
      // Dequantised, the code is within half a step of x.
      CHECK(std::fabs(q[i] * static_cast<double>(p.scale) + p.offset - x[i]) <= 0.5001 * p.scale);
    }
    CHECK(q[std::max_element(x.begin(), x.end()) - x.begin()] == 127);
    CHECK(q[std::min_element(x.begin(), x.end()) - x.begin()] == -128);
  }
  CHECK(codes_checked > 10000);
  CHECK(offsets_checked > 100);
}

TEST_CASE("w8a8 symmetric rule: scale = amax/127, ties to even, amax = 0", "[w8a8]") {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = 0.5f, x[5] = -127.0f, x[6] = -0.5f;
  std::vector<int8_t> q;
  BlockParams p = quantize(x, BlockRule::symmetric, q);
  CHECK(p.scale == 1.0f);
  CHECK(p.offset == 0.0f);
  CHECK(std::vector<int>(q.begin(), q.begin() + 7) == std::vector<int>{127, 2, 4, -2, 0, -127, 0});
  CHECK(p.sum == sum_of(q));

  p = quantize(std::vector<float>(32, 0.0f), BlockRule::symmetric, q);
  CHECK((p.scale == 1.0f && p.sum == 0));
  // amax / 127 underflows to 0: the same as amax = 0.
  x.assign(32, 0.0f);
  x[3] = -0x1p-149f;
  p = quantize(x, BlockRule::symmetric, q);
  CHECK(p.scale == 1.0f);
  CHECK(std::all_of(q.begin(), q.end(), [](int8_t v) { return v == 0; }));

  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int64_t checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<float> b = random_block(rng, 128);
    p = quantize(b, BlockRule::symmetric, q);
    double amax = 0;
    for (float v : b) amax = std::max(amax, std::fabs(static_cast<double>(v)));
    // A float division rounded through double equals the float division.
    REQUIRE(p.scale == static_cast<float>(amax / 127.0));
    for (size_t i = 0; i < b.size(); ++i) {
      const double t = b[i] / static_cast<double>(p.scale);
      REQUIRE(std::fabs(t) <= 127.0 + 1e-4);
      if (std::fabs(std::fabs(t - std::trunc(t)) - 0.5) < 1e-4) continue;
      REQUIRE(q[i] == std::nearbyint(t));
      ++checked;
    }
  }
  CHECK(checked > 30000);
}

TEST_CASE("w8a8 activations and weights: per row and block layout, sums, fp16/bf16 widening", "[w8a8]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t m = 3, k = 256, block = 64;
  std::vector<float> x;
  for (int i = 0; i < m * k / 64; ++i) {
    const auto b = random_block(rng, 64);
    x.insert(x.end(), b.begin(), b.end());
  }
  for (BlockRule rule : {BlockRule::offset, BlockRule::symmetric}) {
    const BlockQuantized a = quantize_activations(x, m, k, block, rule);
    REQUIRE(a.blocks() == 4);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t b = 0; b < 4; ++b) {
        std::vector<int8_t> q(block);
        const BlockParams p = quantize_block(x.data() + r * k + b * block, block, rule, q.data());
        CHECK(std::equal(q.begin(), q.end(), a.q.begin() + r * k + b * block));
        CHECK(a.scale[r * 4 + b] == p.scale);
        CHECK(a.offset[r * 4 + b] == p.offset);
        CHECK(a.sum[r * 4 + b] == sum_of(q));
      }
    const BlockQuantized w = pack_weights(x, m, k, block, rule);
    CHECK(w.q == a.q);
    CHECK(w.sum == a.sum);
  }

  // fp16 1.0, −2.0, 0.5; bf16 1.0, −2.0: widened exactly.
  const uint16_t h[3] = {0x3C00, 0xC000, 0x3800}, bf[2] = {0x3F80, 0xC000};
  CHECK(widen_to_float("fp16", h, 3) == std::vector<float>{1.0f, -2.0f, 0.5f});
  CHECK(widen_to_float("bf16", bf, 2) == std::vector<float>{1.0f, -2.0f});
  CHECK_THAT(error_of([&] { widen_to_float("int8", h, 3); }), Catch::Contains("int8"));

  // Codes as given, ΣB per (channel, block); no offsets → scale only.
  std::vector<int8_t> codes(2 * 64);
  for (int i = 0; i < 128; ++i) codes[i] = static_cast<int8_t>(i % 2 ? -128 : 127);
  codes[64] = 5;
  const BlockQuantized wc = pack_weight_codes(codes, {0.5f, 0.25f, 1.0f, 2.0f}, {}, 2, 64, 32);
  CHECK(wc.rule == BlockRule::symmetric);
  CHECK(wc.offset == std::vector<float>(4, 0.0f));
  CHECK(wc.sum == std::vector<int32_t>{-16, -16, 15 * 127 + 5 - 16 * 128, -16});
}

TEST_CASE("w8a8 bad arguments are errors naming the value", "[w8a8]") {
  std::vector<float> x(2 * 256, 1.0f);
  CHECK_THAT(error_of([&] { quantize_activations(x, 2, 256, 16, BlockRule::offset); }), Catch::Contains("block=16"));
  CHECK_THAT(error_of([&] { quantize_activations(std::vector<float>(1024, 1.0f), 1, 1024, 1024, BlockRule::offset); }),
             Catch::Contains("block=1024"));
  CHECK_THAT(error_of([&] { quantize_activations(std::vector<float>(2 * 96, 1.0f), 2, 96, 64, BlockRule::offset); }),
             Catch::Contains("does not divide k=96"));
  CHECK_THAT(error_of([&] { quantize_activations(x, 3, 256, 64, BlockRule::offset); }), Catch::Contains("768"));
  x[70] = NAN;
  CHECK_THAT(error_of([&] { quantize_activations(x, 2, 256, 64, BlockRule::offset); }), Catch::Contains("finite"));
  x[70] = 3e38f, x[71] = -3e38f;
  CHECK_THAT(error_of([&] { quantize_activations(x, 2, 256, 64, BlockRule::offset); }), Catch::Contains("overflows"));
  CHECK_THAT(error_of([&] { pack_weight_codes(std::vector<int8_t>(64), {1.0f}, {}, 1, 64, 32); }),
             Catch::Contains("scales"));
  CHECK_THAT(error_of([&] { pack_weight_codes(std::vector<int8_t>(64), {1.0f, 1.0f}, {0.0f}, 1, 64, 32); }),
             Catch::Contains("offsets"));

  const BlockQuantized a = quantize_activations(std::vector<float>(128, 1.0f), 1, 128, 64, BlockRule::offset);
  const BlockQuantized w64 = pack_weights(std::vector<float>(128, 1.0f), 1, 128, 64, BlockRule::offset);
  const BlockQuantized w32 = pack_weights(std::vector<float>(128, 1.0f), 1, 128, 32, BlockRule::offset);
  const BlockQuantized wk = pack_weights(std::vector<float>(256, 1.0f), 1, 256, 64, BlockRule::offset);
  CHECK_THAT(error_of([&] { w8a8_gemm_reference(a, w32, {}, "none"); }), Catch::Contains("block=32"));
  CHECK_THAT(error_of([&] { w8a8_gemm_reference(a, wk, {}, "none"); }), Catch::Contains("k=256"));
  CHECK_THAT(error_of([&] { w8a8_gemm_reference(a, w64, {1.0f, 2.0f}, "none"); }), Catch::Contains("bias"));
  CHECK_THAT(error_of([&] { w8a8_gemm_reference(a, w64, {}, "gelu"); }), Catch::Contains("gelu"));
  CHECK_THAT(error_of([&] { w8a8_gemm_reference(a, w64, {}, "none", {0, 1}); }), Catch::Contains("row 1"));
  CHECK_THAT(error_of([&] { w8a8_tolerance(1.0, 1.0, 1, "fp8"); }), Catch::Contains("fp8"));
}

TEST_CASE("w8a8 GEMM reference equals a float64 dequantize-then-matmul of the same codes", "[w8a8]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const BlockRule rules[2] = {BlockRule::offset, BlockRule::symmetric};
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t block = int64_t{32} << (rng() % 5), k = block * (1 + rng() % 4);
    const int64_t m = 1 + rng() % 5, n = 1 + rng() % 7;
    const BlockRule ra = rules[trial % 2], rw = rules[(trial / 2) % 2];
    std::vector<float> x(m * k), wf(n * k), bias;
    for (auto& v : x) v = nd(rng) + 0.3f;
    for (auto& v : wf) v = 0.05f * nd(rng) - 0.01f;
    if (trial % 3) {
      bias.resize(n);
      for (auto& v : bias) v = nd(rng);
    }
    INFO("trial " << trial << " m " << m << " n " << n << " k " << k << " block " << block);
    const BlockQuantized a = quantize_activations(x, m, k, block, ra);
    const BlockQuantized w = pack_weights(wf, n, k, block, rw);
    const W8A8Result r = w8a8_gemm_reference(a, w, bias, "none");
    REQUIRE((r.m == m && r.n == n));
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = bias.empty() ? 0.0 : bias[j], size = std::fabs(acc);
        for (int64_t kk = 0; kk < k; ++kk) {
          const int64_t ga = i * (k / block) + kk / block, gw = j * (k / block) + kk / block;
          const double da = a.q[i * k + kk] * static_cast<double>(a.scale[ga]) + a.offset[ga];
          const double dw = w.q[j * k + kk] * static_cast<double>(w.scale[gw]) + w.offset[gw];
          acc += da * dw;
          size += std::fabs(da * dw);
        }
        const double diff = std::fabs(acc - r.y[i * n + j]);
        worst = std::max(worst, diff / (size + r.magnitude[i * n + j]));
        REQUIRE(diff <= 1e-12 * (size + r.magnitude[i * n + j]));
        // And the quantized product is near the float one (quantization error, loose).
        double exact = bias.empty() ? 0.0 : bias[j];
        for (int64_t kk = 0; kk < k; ++kk) exact += static_cast<double>(x[i * k + kk]) * wf[j * k + kk];
        CHECK(std::fabs(exact - r.y[i * n + j]) <= 0.1 * size + 1e-3);
      }
    INFO("worst relative difference " << worst);
    // A sample of rows gives those rows of the full result, bit for bit.
    const std::vector<int64_t> sample = {m - 1, 0, m / 2};
    const W8A8Result part = w8a8_gemm_reference(a, w, bias, "none", sample);
    REQUIRE((part.m == 3 && part.n == n));
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < n; ++j) {
        CHECK(part.y[i * n + j] == r.y[sample[i] * n + j]);
        CHECK(part.magnitude[i * n + j] == r.magnitude[sample[i] * n + j]);
      }
  }
}

TEST_CASE("w8a8 GEMM: saturated codes give exact int32 block products", "[w8a8]") {
  // 512 × (−128)·(−128) = 2^23, the largest block product, and 512 × (−128)·127.
  const BlockQuantized a = pack_weight_codes(std::vector<int8_t>(512, -128), {1.0f}, {}, 1, 512, 512);
  const BlockQuantized w = pack_weight_codes(std::vector<int8_t>(512, -128), {1.0f}, {}, 1, 512, 512);
  const BlockQuantized v = pack_weight_codes(std::vector<int8_t>(512, 127), {0.5f}, {}, 1, 512, 512);
  CHECK(w8a8_gemm_reference(a, w, {}, "none").y[0] == 8388608.0);
  CHECK(w8a8_gemm_reference(a, v, {}, "none").y[0] == -0.5 * 128 * 127 * 512);
  // With offsets every term is used: (s·q + o)(s'·q' + o') summed over 512.
  const BlockQuantized ao = pack_weight_codes(std::vector<int8_t>(512, 127), {0.25f}, {2.0f}, 1, 512, 512);
  const BlockQuantized wo = pack_weight_codes(std::vector<int8_t>(512, -128), {0.5f}, {-1.0f}, 1, 512, 512);
  CHECK(w8a8_gemm_reference(ao, wo, {}, "none").y[0] == 512 * (0.25 * 127 + 2.0) * (0.5 * -128 - 1.0));
}

TEST_CASE("w8a8 GEMM clamps: relu and relu6 clamp the biased result", "[w8a8]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t m = 4, n = 16, k = 128;
  std::vector<float> x(m * k), wf(n * k), bias(n);
  for (auto& v : x) v = nd(rng);
  for (auto& v : wf) v = 0.5f * nd(rng);
  for (auto& v : bias) v = 3.0f * nd(rng);
  const BlockQuantized a = quantize_activations(x, m, k, 32, BlockRule::offset);
  const BlockQuantized w = pack_weights(wf, n, k, 32, BlockRule::offset);
  const auto none = w8a8_gemm_reference(a, w, bias, "none").y;
  const auto relu = w8a8_gemm_reference(a, w, bias, "relu").y;
  const auto relu6 = w8a8_gemm_reference(a, w, bias, "relu6").y;
  int below = 0, above = 0;
  for (size_t i = 0; i < none.size(); ++i) {
    below += none[i] < 0, above += none[i] > 6;
    CHECK(relu[i] == (none[i] < 0 ? 0.0 : none[i]));
    CHECK(relu6[i] == std::min(6.0, std::max(0.0, none[i])));
  }
  CHECK(below > 0);  // the data reach both sides of the clamps
  CHECK(above > 0);
}

TEST_CASE("w8a8 tolerance covers a float32 combination and is not vacuous", "[w8a8]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t m = 8, n = 8, block = 128, k = 1024, nb = k / block;
  std::vector<float> x(m * k), wf(n * k), bias(n);
  for (auto& v : x) v = nd(rng) + 2.0f;
  for (auto& v : wf) v = 0.02f * nd(rng) + 0.01f;
  for (auto& v : bias) v = nd(rng);
  const BlockQuantized a = quantize_activations(x, m, k, block, BlockRule::offset);
  const BlockQuantized w = pack_weights(wf, n, k, block, BlockRule::offset);
  const W8A8Result r = w8a8_gemm_reference(a, w, bias, "none");
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      // The seed's DequantAndAcc arithmetic in float32, accumulated block by block.
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t cq = 0;
        for (int64_t kk = 0; kk < block; ++kk) cq += a.q[i * k + b * block + kk] * w.q[j * k + b * block + kk];
        const float sa = a.scale[i * nb + b], oa = a.offset[i * nb + b], sw = w.scale[j * nb + b],
                    ow = w.offset[j * nb + b];
        const float term1 = sa * (static_cast<float>(cq) * sw + static_cast<float>(a.sum[i * nb + b]) * ow);
        const float term2 = oa * (static_cast<float>(w.sum[j * nb + b]) * sw + static_cast<float>(block) * ow);
        acc += term1 + term2;
      }
      acc += bias[j];
      const double ref = r.y[i * n + j], mag = r.magnitude[i * n + j];
      const double tol = w8a8_tolerance(mag, ref, nb, "fp32");
      CHECK(std::fabs(acc - ref) <= tol);
      CHECK(tol <= 1e-6 * mag + 0x1p-24 * std::fabs(ref) * 1.01);  // (8 + 6)·2^-24 ≈ 8.3e-7 of the magnitude
    }
  // fp16 output: 2^-11 relative on top, and the subnormal floor.
  CHECK(w8a8_tolerance(0.0, 1.0, 1, "fp16") == Approx(0x1p-11 + 0x1p-25).epsilon(1e-12));
  CHECK(w8a8_tolerance(0.0, 1.0, 1, "bf16") == Approx(0x1p-8).epsilon(1e-12));
  CHECK(w8a8_tolerance(0.0, 1.0, 1, "fp32") == Approx(0x1p-24).epsilon(1e-12));
  CHECK(w8a8_tolerance(1.0, 0.0, 10, "fp32") == Approx(16 * 0x1p-24).epsilon(1e-5));
}
