#include "tuner/reference/qconv2d.h"

#include <cmath>

#include "codegen/error.h"
#include "tuner/reference/act_clamp.h"

namespace qjit::tuner {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

void expect_size(const char* what, size_t got, int64_t want) {
  if (static_cast<int64_t>(got) != want)
    throw Error("argument", std::string("qconv2d: ") + what + " has " + std::to_string(got) + " elements; expected " +
                                str(want));
}

void check_positive(const char* what, int64_t v) {
  if (v < 1) throw Error("spec", std::string("qconv2d: ") + what + "=" + str(v) + " (need ≥ 1)");
}

void check_int4_shape(int64_t ci) {
  if (ci % 2)
    throw Error("spec", "qconv2d: int4 weights need an even ci (two channels per byte); ci=" + str(ci));
}

}  // namespace

void check_qconv2d(const Conv2dShape& s, const QConvWeights& w, const std::vector<float>& bias,
                   const std::string& act) {
  check_act(act);
  if (s.layout != "nchw" && s.layout != "nhwc")
    throw Error("spec", "qconv2d: layout=\"" + s.layout + "\" (expected nchw or nhwc)");
  check_positive("batch", s.batch), check_positive("ci", s.ci), check_positive("co", s.co);
  conv_out_size(s.h, s.kh, s.stride_h, s.pad_h, s.dil_h, "h");
  conv_out_size(s.w, s.kw, s.stride_w, s.pad_w, s.dil_w, "w");
  if (w.bits != 4 && w.bits != 8) throw Error("spec", "qconv2d: bits=" + std::to_string(w.bits) + " (expected 4 or 8)");
  if (w.block < 1 || s.ci % w.block)
    throw Error("spec", "qconv2d: block=" + str(w.block) + " does not divide ci=" + str(s.ci));
  if (w.bits == 4) {
    check_int4_shape(s.ci);
    // A byte holds channels 2j, 2j + 1; the seed walks a block as bytes
    // group_idx·block/2 .. +block/2, so a block must not split a byte.
    if (w.block % 2) throw Error("spec", "qconv2d: int4 needs an even block (a byte holds two channels); block=" + str(w.block));
  }
  expect_size("weight codes [co][ci][kh][kw]", w.q.size(), s.co * s.ci * s.kh * s.kw);
  expect_size("weight scales [co][ci/block]", w.scale.size(), s.co * (s.ci / w.block));
  expect_size("weight offsets [co][ci/block]", w.offset.size(), s.co * (s.ci / w.block));
  if (!bias.empty()) expect_size("bias [co]", bias.size(), s.co);
  const int lo = w.bits == 4 ? -8 : -128, hi = w.bits == 4 ? 7 : 127;
  for (size_t i = 0; i < w.q.size(); ++i)
    if (w.q[i] < lo || w.q[i] > hi)
      throw Error("argument", "qconv2d: weight code " + std::to_string(i) + " is " + std::to_string(w.q[i]) +
                                  " outside the int" + std::to_string(w.bits) + " range " + std::to_string(lo) +
                                  ".." + std::to_string(hi));
}

std::vector<double> qconv2d_reference(const Conv2dShape& s, const std::vector<float>& x, const QConvWeights& w,
                                      const std::vector<float>& bias, const std::string& act,
                                      std::vector<double>* magnitude) {
  check_qconv2d(s, w, bias, act);
  expect_size("input x", x.size(), s.batch * s.ci * s.h * s.w);
  const int64_t oh = conv_out_size(s.h, s.kh, s.stride_h, s.pad_h, s.dil_h, "h");
  const int64_t ow = conv_out_size(s.w, s.kw, s.stride_w, s.pad_w, s.dil_w, "w");
  const bool nhwc = s.layout == "nhwc";
  auto x_at = [&](int64_t b, int64_t c, int64_t y, int64_t xx) {
    return nhwc ? x[((b * s.h + y) * s.w + xx) * s.ci + c] : x[((b * s.ci + c) * s.h + y) * s.w + xx];
  };
  const int64_t groups = s.ci / w.block;
  // The dequantised weights once, [co][ci][kh][kw], exact products in float64.
  std::vector<double> wd(w.q.size()), wmag(w.q.size());  // w, and |q·s| + |o|
  for (size_t i = 0; i < wd.size(); ++i) {
    const int64_t co = static_cast<int64_t>(i) / (s.ci * s.kh * s.kw), ci = (static_cast<int64_t>(i) / (s.kh * s.kw)) % s.ci;
    const int64_t p = co * groups + ci / w.block;
    wd[i] = static_cast<double>(w.q[i]) * w.scale[p] + w.offset[p];
    wmag[i] = std::fabs(static_cast<double>(w.q[i]) * w.scale[p]) + std::fabs(static_cast<double>(w.offset[p]));
  }
  std::vector<double> y(s.batch * s.co * oh * ow);
  if (magnitude) magnitude->assign(y.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t co = 0; co < s.co; ++co)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = bias.empty() ? 0.0 : bias[co];
          double mag = std::fabs(acc);
          for (int64_t fy = 0; fy < s.kh; ++fy) {
            const int64_t iy = oy * s.stride_h - s.pad_h + fy * s.dil_h;
            if (iy < 0 || iy >= s.h) continue;
            for (int64_t fx = 0; fx < s.kw; ++fx) {
              const int64_t ix = ox * s.stride_w - s.pad_w + fx * s.dil_w;
              if (ix < 0 || ix >= s.w) continue;
              for (int64_t ci = 0; ci < s.ci; ++ci) {
                const double xv = x_at(b, ci, iy, ix);
                const int64_t wi = ((co * s.ci + ci) * s.kh + fy) * s.kw + fx;
                acc += xv * wd[wi];
                mag += std::fabs(xv) * wmag[wi];
              }
            }
          }
          const int64_t at = nhwc ? ((b * oh + oy) * ow + ox) * s.co + co : ((b * s.co + co) * oh + oy) * ow + ox;
          y[at] = apply_act(acc, act);
          if (magnitude) (*magnitude)[at] = mag;
        }
  return y;
}

std::vector<int8_t> reorder_ohwi(const std::vector<int8_t>& q, int64_t co, int64_t ci, int64_t kh, int64_t kw) {
  expect_size("weight codes [co][ci][kh][kw]", q.size(), co * ci * kh * kw);
  std::vector<int8_t> out(q.size());
  for (int64_t o = 0; o < co; ++o)
    for (int64_t c = 0; c < ci; ++c)
      for (int64_t fy = 0; fy < kh; ++fy)
        for (int64_t fx = 0; fx < kw; ++fx)
          out[((o * kh + fy) * kw + fx) * ci + c] = q[((o * ci + c) * kh + fy) * kw + fx];
  return out;
}

std::vector<uint8_t> pack_int4_ohwi(const std::vector<int8_t>& q, int64_t co, int64_t ci, int64_t kh, int64_t kw) {
  check_int4_shape(ci);
  const std::vector<int8_t> r = reorder_ohwi(q, co, ci, kh, kw);
  std::vector<uint8_t> out(r.size() / 2);
  for (size_t j = 0; j < out.size(); ++j) {
    for (int e = 0; e < 2; ++e)
      if (r[2 * j + e] < -8 || r[2 * j + e] > 7)
        throw Error("argument", "qconv2d: int4 code " + std::to_string(r[2 * j + e]) + " outside −8..7");
    out[j] = static_cast<uint8_t>(((r[2 * j] + 8) << 4) | (r[2 * j + 1] + 8));  // channel 2j high, 2j + 1 low
  }
  return out;
}

std::vector<int8_t> unpack_int4_ohwi(const std::vector<uint8_t>& bytes, int64_t co, int64_t ci, int64_t kh,
                                     int64_t kw) {
  check_int4_shape(ci);
  expect_size("packed int4 weights [co][kh][kw][ci/2]", bytes.size(), co * kh * kw * ci / 2);
  std::vector<int8_t> out(bytes.size() * 2);
  for (size_t j = 0; j < bytes.size(); ++j) {
    out[2 * j] = static_cast<int8_t>((bytes[j] >> 4) - 8);
    out[2 * j + 1] = static_cast<int8_t>((bytes[j] & 15) - 8);
  }
  return out;
}

std::vector<uint8_t> pack_qconv2d_weights(const std::vector<int8_t>& q, int bits, int64_t co, int64_t ci, int64_t kh,
                                          int64_t kw) {
  if (bits == 4) return pack_int4_ohwi(q, co, ci, kh, kw);
  if (bits != 8) throw Error("spec", "qconv2d: bits=" + std::to_string(bits) + " (expected 4 or 8)");
  const std::vector<int8_t> r = reorder_ohwi(q, co, ci, kh, kw);
  std::vector<uint8_t> out(r.size());
  for (size_t i = 0; i < r.size(); ++i) out[i] = static_cast<uint8_t>(r[i]);  // two's complement byte
  return out;
}

std::vector<int8_t> unpack_qconv2d_weights(const std::vector<uint8_t>& bytes, int bits, int64_t co, int64_t ci,
                                           int64_t kh, int64_t kw) {
  std::vector<int8_t> ohwi;
  if (bits == 4) {
    ohwi = unpack_int4_ohwi(bytes, co, ci, kh, kw);
  } else if (bits == 8) {
    expect_size("packed int8 weights [co][kh][kw][ci]", bytes.size(), co * kh * kw * ci);
    ohwi.assign(bytes.begin(), bytes.end());
    for (size_t i = 0; i < bytes.size(); ++i) ohwi[i] = static_cast<int8_t>(bytes[i]);
  } else {
    throw Error("spec", "qconv2d: bits=" + std::to_string(bits) + " (expected 4 or 8)");
  }
  std::vector<int8_t> out(ohwi.size());
  for (int64_t o = 0; o < co; ++o)
    for (int64_t c = 0; c < ci; ++c)
      for (int64_t fy = 0; fy < kh; ++fy)
        for (int64_t fx = 0; fx < kw; ++fx)
          out[((o * ci + c) * kh + fy) * kw + fx] = ohwi[((o * kh + fy) * kw + fx) * ci + c];
  return out;
}

double qconv2d_tolerance(double magnitude, double y, int64_t k, const std::string& x_type) {
  double u_out, floor_out = 0.0, weight16 = 0.0;
  if (x_type == "fp32") {
    u_out = 0x1p-24;
  } else if (x_type == "fp16") {
    u_out = 0x1p-11, floor_out = 0x1p-25;
    weight16 = 0x1p-11 * (1.0 + 2 * 0x1p-24 / (1.0 - 2 * 0x1p-24));
  } else {
    throw Error("argument", "qconv2d: x type \"" + x_type + "\" (expected fp16 or fp32)");
  }
  auto gamma = [&](double u) {
    const double nu = static_cast<double>(k + 4) * u;
    return nu / (1.0 - nu);
  };
  const double combine = (gamma(0x1p-23) + weight16 + gamma(0x1p-53)) * magnitude;
  return combine + u_out * (std::fabs(y) + combine) + floor_out;  // the value rounded is within `combine` of y
}

}  // namespace qjit::tuner
