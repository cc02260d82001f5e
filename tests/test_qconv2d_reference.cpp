// qconv2d on the CPU: the output size rule, the seed's int4 nibble order and
// [Co][Kh][Kw][Ci] reorder, and the float64 reference against an independent
// convolution over an explicitly zero-padded input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "codegen/error.h"
#include "tests/helpers.h"
#include "tuner/reference/qconv2d.h"

using namespace qjit::tuner;
using qjit::test::error_of;

namespace {

uint64_t fresh_seed() { return (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); }

QConvWeights random_weights(std::mt19937_64& rng, const Conv2dShape& s, int bits, int64_t block) {
  QConvWeights w;
  w.bits = bits, w.block = block;
  const int levels = bits == 4 ? 16 : 256, low = bits == 4 ? -8 : -128;
  w.q.resize(s.co * s.ci * s.kh * s.kw);
  for (auto& v : w.q) v = static_cast<int8_t>(low + static_cast<int>(rng() % levels));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  w.scale.resize(s.co * (s.ci / block)), w.offset.resize(w.scale.size());
  for (auto& v : w.scale) v = 0.01f + 0.05f * std::fabs(u(rng));
  for (auto& v : w.offset) v = 0.05f * u(rng);
  return w;
}

std::vector<float> random_vector(std::mt19937_64& rng, size_t count) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& e : v) e = nd(rng);
  return v;
}

// The convolution written another way: pad the NCHW input with zeros, then
// every tap reads inside the padded tensor; weights dequantised per element
// from the packed int4 bytes (int4) so the packer is on the path too.
std::vector<double> independent_conv(const Conv2dShape& s, const std::vector<float>& x, const QConvWeights& w,
                                     const std::vector<float>& bias, std::vector<double>* size_out) {
  const int64_t ph = s.h + 2 * s.pad_h, pw = s.w + 2 * s.pad_w;
  std::vector<double> xp(s.batch * s.ci * ph * pw, 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t c = 0; c < s.ci; ++c)
      for (int64_t y = 0; y < s.h; ++y)
        for (int64_t xx = 0; xx < s.w; ++xx)
          xp[((b * s.ci + c) * ph + y + s.pad_h) * pw + xx + s.pad_w] = x[((b * s.ci + c) * s.h + y) * s.w + xx];
  // Codes in [Co][Kh][Kw][Ci]: from the packed bytes for int4, else reordered.
  const std::vector<int8_t> ohwi = w.bits == 4 ? unpack_int4_ohwi(pack_int4_ohwi(w.q, s.co, s.ci, s.kh, s.kw), s.co,
                                                                  s.ci, s.kh, s.kw)
                                               : reorder_ohwi(w.q, s.co, s.ci, s.kh, s.kw);
  int64_t oh = 0, ow = 0;
  while (oh * s.stride_h + s.dil_h * (s.kh - 1) < ph) ++oh;
  while (ow * s.stride_w + s.dil_w * (s.kw - 1) < pw) ++ow;
  std::vector<double> y(s.batch * s.co * oh * ow);
  size_out->assign(y.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t o = 0; o < s.co; ++o)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = bias.empty() ? 0.0 : bias[o], size = std::fabs(acc);
          for (int64_t fy = 0; fy < s.kh; ++fy)
            for (int64_t fx = 0; fx < s.kw; ++fx)
              for (int64_t c = 0; c < s.ci; ++c) {
                const int64_t g = o * (s.ci / w.block) + c / w.block;
                const double wv = ohwi[((o * s.kh + fy) * s.kw + fx) * s.ci + c] * static_cast<double>(w.scale[g]) +
                                  w.offset[g];
                const double xv = xp[((b * s.ci + c) * ph + oy * s.stride_h + fy * s.dil_h) * pw + ox * s.stride_w +
                                     fx * s.dil_w];
                acc += xv * wv;
                size += std::fabs(xv * wv);
              }
          y[((b * s.co + o) * oh + oy) * ow + ox] = acc;
          (*size_out)[((b * s.co + o) * oh + oy) * ow + ox] = size;
        }
  return y;
}

std::vector<float> nchw_to_nhwc(const std::vector<float>& x, int64_t n, int64_t c, int64_t h, int64_t w) {
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t xx = 0; xx < w; ++xx) out[((b * h + y) * w + xx) * c + ch] = x[((b * c + ch) * h + y) * w + xx];
  return out;
}

}  // namespace

TEST_CASE("qconv2d output size: floor((in + 2·pad − dil·(k − 1) − 1) / stride) + 1, errors", "[qconv2d]") {
  CHECK(conv_out_size(7, 3, 2, 1, 1, "h") == 4);
  CHECK(conv_out_size(5, 3, 1, 0, 2, "h") == 1);
  CHECK(conv_out_size(3, 1, 4, 0, 1, "h") == 1);   // stride > kernel and input
  CHECK(conv_out_size(2, 3, 1, 4, 1, "h") == 8);   // padding larger than the kernel
  CHECK(conv_out_size(10, 2, 3, 0, 1, "w") == 3);  // stride > kernel skips inputs
  CHECK_THAT(error_of([] { conv_out_size(5, 3, 0, 0, 1, "h"); }), Catch::Contains("stride_h=0"));
  CHECK_THAT(error_of([] { conv_out_size(5, 3, 1, -1, 1, "w"); }), Catch::Contains("pad_w=-1"));
  CHECK_THAT(error_of([] { conv_out_size(5, 3, 1, 0, 0, "h"); }), Catch::Contains("dil_h=0"));
  CHECK_THAT(error_of([] { conv_out_size(5, 3, 1, 0, 3, "h"); }), Catch::Contains("empty along h"));
  CHECK_THAT(error_of([] { conv_out_size(5, 0, 1, 0, 1, "h"); }), Catch::Contains("kernel h=0"));
}

TEST_CASE("qconv2d int4: the seed's nibble order (channel 2j high) and [Co][Kh][Kw][Ci] reorder", "[qconv2d]") {
  // Codes −8 and 7 are the nibbles 0 and 15.
  CHECK(pack_int4_ohwi({-8, 7}, 1, 2, 1, 1) == std::vector<uint8_t>{0x0F});
  CHECK(pack_int4_ohwi({7, -8}, 1, 2, 1, 1) == std::vector<uint8_t>{0xF0});
  CHECK(unpack_int4_ohwi({0x0F, 0xF0, 0x80, 0x7A}, 1, 8, 1, 1) ==
        std::vector<int8_t>{-8, 7, 7, -8, 0, -8, -1, 2});

  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t co = 3, ci = 6, kh = 2, kw = 3;
  std::vector<int8_t> q(co * ci * kh * kw);
  for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 16) - 8);
  const std::vector<int8_t> r = reorder_ohwi(q, co, ci, kh, kw);
  for (int64_t o = 0; o < co; ++o)
    for (int64_t c = 0; c < ci; ++c)
      for (int64_t y = 0; y < kh; ++y)
        for (int64_t x = 0; x < kw; ++x) {
          const size_t src = static_cast<size_t>(o * ci * kh * kw + c * kh * kw + y * kw + x);
          const size_t dst = static_cast<size_t>(o * kh * kw * ci + y * kw * ci + x * ci + c);
          REQUIRE(r[dst] == q[src]);
        }
  const std::vector<uint8_t> bytes = pack_int4_ohwi(q, co, ci, kh, kw);
  REQUIRE(bytes.size() == q.size() / 2);
  for (size_t j = 0; j < bytes.size(); ++j) {
    REQUIRE((bytes[j] >> 4) == r[2 * j] + 8);
    REQUIRE((bytes[j] & 15) == r[2 * j + 1] + 8);
  }
  CHECK(unpack_int4_ohwi(bytes, co, ci, kh, kw) == r);
}

TEST_CASE("qconv2d int4 extremes: w = (nibble − 8)·s + o on a 1×1 conv", "[qconv2d]") {
  Conv2dShape s;
  s.ci = 2, s.co = 1;
  QConvWeights w;
  w.bits = 4, w.block = 2, w.q = {-8, 7}, w.scale = {1.0f}, w.offset = {0.5f};
  // x = (1, 10): (−8 + 0.5)·1 + (7 + 0.5)·10 + bias 2 = 69.5.
  CHECK(qconv2d_reference(s, {1.0f, 10.0f}, w, {2.0f}, "none") == std::vector<double>{69.5});
  CHECK(qconv2d_reference(s, {1.0f, 10.0f}, w, {2.0f}, "relu6") == std::vector<double>{6.0});
  CHECK(qconv2d_reference(s, {1.0f, -10.0f}, w, {}, "relu") == std::vector<double>{0.0});
  CHECK(qconv2d_reference(s, {1.0f, -10.0f}, w, {}, "none") == std::vector<double>{-82.5});
}

TEST_CASE("qconv2d reference equals an independent padded convolution", "[qconv2d]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  struct Case {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  };
  const Case cases[] = {
      {3, 3, 1, 1, 1, 1, 1, 1},  // ResNet 3×3
      {2, 2, 3, 3, 0, 0, 1, 1},  // stride > kernel
      {3, 3, 1, 2, 4, 5, 1, 1},  // padding larger than the kernel
      {3, 3, 1, 1, 2, 2, 2, 2},  // dilation 2
      {1, 1, 2, 2, 0, 0, 1, 1},  // strided 1×1
      {3, 2, 2, 1, 1, 0, 2, 1},  // everything unequal
  };
  for (int bits : {4, 8})
    for (const Case& c : cases) {
      Conv2dShape s;
      s.batch = 1 + rng() % 2, s.ci = 8, s.h = 5 + rng() % 4, s.w = 6 + rng() % 3, s.co = 3;
      s.kh = c.kh, s.kw = c.kw, s.stride_h = c.sh, s.stride_w = c.sw, s.pad_h = c.ph, s.pad_w = c.pw;
      s.dil_h = c.dh, s.dil_w = c.dw;
      const int64_t block = rng() % 2 ? 2 : 8;  // per block and per channel
      INFO("bits " << bits << " kernel " << c.kh << "x" << c.kw << " stride " << c.sh << "," << c.sw << " pad "
                   << c.ph << "," << c.pw << " dil " << c.dh << "," << c.dw << " block " << block);
      const QConvWeights w = random_weights(rng, s, bits, block);
      const std::vector<float> x = random_vector(rng, s.batch * s.ci * s.h * s.w);
      const std::vector<float> bias = rng() % 2 ? random_vector(rng, s.co) : std::vector<float>{};
      const std::vector<double> y = qconv2d_reference(s, x, w, bias, "none");
      std::vector<double> size;
      const std::vector<double> want = independent_conv(s, x, w, bias, &size);
      REQUIRE(y.size() == want.size());
      for (size_t i = 0; i < y.size(); ++i) REQUIRE(std::fabs(y[i] - want[i]) <= 1e-13 * size[i]);

      // The same convolution channels-last: the same numbers, transposed.
      Conv2dShape t = s;
      t.layout = "nhwc";
      const int64_t oh = conv_out_size(s.h, s.kh, s.stride_h, s.pad_h, s.dil_h, "h");
      const int64_t ow = conv_out_size(s.w, s.kw, s.stride_w, s.pad_w, s.dil_w, "w");
      const std::vector<double> yt = qconv2d_reference(t, nchw_to_nhwc(x, s.batch, s.ci, s.h, s.w), w, bias, "none");
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t o = 0; o < s.co; ++o)
          for (int64_t i = 0; i < oh * ow; ++i)
            REQUIRE(yt[(b * oh * ow + i) * s.co + o] == y[(b * s.co + o) * oh * ow + i]);

      // relu6 clamps the same values.
      const std::vector<double> y6 = qconv2d_reference(s, x, w, bias, "relu6");
      for (size_t i = 0; i < y.size(); ++i) REQUIRE(y6[i] == std::min(6.0, std::max(0.0, y[i])));
    }
}

TEST_CASE("qconv2d 1×1 convolution equals a GEMM of the dequantised weights", "[qconv2d]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  Conv2dShape s;
  s.batch = 2, s.ci = 16, s.h = 3, s.w = 5, s.co = 7, s.layout = "nhwc";
  const QConvWeights w = random_weights(rng, s, 8, 4);
  const std::vector<float> x = random_vector(rng, s.batch * s.h * s.w * s.ci);  // rows [N·H·W][Ci]
  const std::vector<double> y = qconv2d_reference(s, x, w, {}, "none");
  const int64_t rows = s.batch * s.h * s.w;
  REQUIRE(static_cast<int64_t>(y.size()) == rows * s.co);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < s.co; ++o) {
      double acc = 0.0, size = 0.0;
      for (int64_t c = 0; c < s.ci; ++c) {
        const int64_t g = o * (s.ci / 4) + c / 4;
        const double p = x[r * s.ci + c] * (w.q[o * s.ci + c] * static_cast<double>(w.scale[g]) + w.offset[g]);
        acc += p, size += std::fabs(p);
      }
      REQUIRE(std::fabs(y[r * s.co + o] - acc) <= 1e-13 * size);
    }
}

TEST_CASE("qconv2d bad arguments are errors naming the value", "[qconv2d]") {
  Conv2dShape s;
  s.ci = 6, s.h = 4, s.w = 4, s.co = 2, s.kh = 3, s.kw = 3;
  std::mt19937_64 rng(1);
  const QConvWeights w8 = random_weights(rng, s, 8, 3), w4 = random_weights(rng, s, 4, 2);
  const std::vector<float> x(6 * 16, 1.0f);
  CHECK(qconv2d_reference(s, x, w8, {}, "none").size() == 2 * 2 * 2);
  auto err = [&](Conv2dShape t, QConvWeights w, std::vector<float> bias = {}, std::string act = "none") {
    return error_of([&] { qconv2d_reference(t, x, w, bias, act); });
  };
  Conv2dShape t = s;
  t.stride_w = 0;
  CHECK_THAT(err(t, w8), Catch::Contains("stride_w=0"));
  t = s, t.pad_h = -1;
  CHECK_THAT(err(t, w8), Catch::Contains("pad_h=-1"));
  t = s, t.dil_h = 2;
  CHECK_THAT(err(t, w8), Catch::Contains("empty along h"));
  QConvWeights w = w8;
  w.block = 4;
  CHECK_THAT(err(s, w), Catch::Contains("block=4 does not divide ci=6"));
  w = w8, w.bits = 4, w.block = 3;
  for (auto& v : w.q) v = static_cast<int8_t>(v / 16);
  CHECK_THAT(err(s, w), Catch::Contains("even block"));
  w = w4, w.q[5] = 8;
  CHECK_THAT(err(s, w), Catch::Contains("is 8 outside the int4 range"));
  w = w8, w.bits = 3;
  CHECK_THAT(err(s, w), Catch::Contains("bits=3"));
  t = s, t.layout = "nchw16c";
  CHECK_THAT(err(t, w8), Catch::Contains("nchw16c"));
  CHECK_THAT(err(s, w8, {1.0f}), Catch::Contains("bias [co]"));
  CHECK_THAT(err(s, w8, {}, "gelu"), Catch::Contains("gelu"));
  w = w8, w.scale.pop_back();
  CHECK_THAT(err(s, w), Catch::Contains("weight scales"));
  // int4 needs an even ci: 5 channels cannot be packed two per byte.
  CHECK_THAT(error_of([] { pack_int4_ohwi(std::vector<int8_t>(5), 1, 5, 1, 1); }), Catch::Contains("even ci"));
  t = s, t.ci = 5;
  QConvWeights w5;
  w5.bits = 4, w5.block = 5, w5.q.assign(2 * 5 * 9, 0), w5.scale.assign(2, 1.0f), w5.offset.assign(2, 0.0f);
  CHECK_THAT(error_of([&] { qconv2d_reference(t, std::vector<float>(5 * 16, 1.0f), w5, {}, "none"); }),
             Catch::Contains("even ci"));
}
