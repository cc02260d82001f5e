// qconv2d's tuning workload: random x, codes, scales, offsets and bias; the
// packed weights in copies rotated beyond L2; verification of every output
// against the float64 reference within qconv2d_tolerance. No library
// baseline: cuDNN has no int4/int8-weight convolution with per-block
// (scale, offset); peers.py measures cuDNN's fp16 convolution on the
// dequantised weights.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include "codegen/numeric.h"
#include "runtime/driver.h"
#include "tuner/reference/qconv2d.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {

class QConv2dWorkload final : public Workload {
 public:
  QConv2dWorkload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
    s_.batch = spec.get_int("n"), s_.ci = spec.get_int("ci"), s_.h = spec.get_int("h"), s_.w = spec.get_int("w");
    s_.co = spec.get_int("co"), s_.kh = spec.get_int("kh"), s_.kw = spec.get_int("kw");
    s_.stride_h = spec.get_int("stride_h"), s_.stride_w = spec.get_int("stride_w");
    s_.pad_h = spec.get_int("pad_h"), s_.pad_w = spec.get_int("pad_w");
    s_.dil_h = spec.get_int("dil_h"), s_.dil_w = spec.get_int("dil_w");
    s_.layout = spec.get_str("layout");
    w_.bits = static_cast<int>(spec.get_int("bits"));
    w_.block = spec.get_int("block");
    xtype_ = spec.get_str("x");
    act_ = spec.get_str("act");
    const bool fp16 = xtype_ == "fp16";
    SplitMix64 rng{seed};

    // x in its type; the reference reads the same values widened.
    x_.resize(s_.batch * s_.ci * s_.h * s_.w);
    std::vector<uint16_t> x16(fp16 ? x_.size() : 0);
    for (size_t i = 0; i < x_.size(); ++i) {
      const float v = rng.uniform();
      if (fp16) x16[i] = float_to_half(v), x_[i] = half_to_float(x16[i]);
      else x_[i] = v;
    }
    const int lo = w_.bits == 4 ? -8 : -128, span = w_.bits == 4 ? 16 : 256;
    w_.q.resize(s_.co * s_.ci * s_.kh * s_.kw);
    for (auto& q : w_.q) q = static_cast<int8_t>(lo + static_cast<int>(rng.next() % span));
    // Scales of either sign and offsets that may cancel q·s: what a fit
    // per block produces. The weights then have magnitude ~ 8 / 2^(bits-1) · 0.02.
    const double unit = 0.02 * 8.0 / (1 << (w_.bits - 1));
    w_.scale.resize(s_.co * (s_.ci / w_.block));
    w_.offset.resize(w_.scale.size());
    for (auto& v : w_.scale) v = static_cast<float>(unit * (0.5 + 0.5 * std::fabs(rng.uniform())) * (rng.next() & 1 ? 1 : -1));
    for (auto& v : w_.offset) v = static_cast<float>(0.02 * rng.uniform());
    if (spec.get_str("bias") == "yes") {
      bias_.resize(s_.co);
      for (auto& v : bias_) v = rng.uniform();
    }

    const auto packed = pack_qconv2d_weights(w_.q, w_.bits, s_.co, s_.ci, s_.kh, s_.kw);
    const int copies =
        static_cast<int>(std::clamp<size_t>(3 * l2_bytes / std::max<size_t>(packed.size(), 1) + 1, 1, 16));
    for (int c = 0; c < copies; ++c) {
      q_.emplace_back(packed.size());
      q_[c].upload(packed.data(), packed.size());
    }
    const size_t xb = fp16 ? 2 : 4;
    x_dev_ = DeviceBuffer(x_.size() * xb);
    x_dev_.upload(fp16 ? static_cast<const void*>(x16.data()) : x_.data(), x_.size() * xb);
    scales_ = DeviceBuffer(w_.scale.size() * 4);
    scales_.upload(w_.scale.data(), w_.scale.size() * 4);
    offsets_ = DeviceBuffer(w_.offset.size() * 4);
    offsets_.upload(w_.offset.data(), w_.offset.size() * 4);
    if (!bias_.empty()) {
      bias_dev_ = DeviceBuffer(bias_.size() * 4);
      bias_dev_.upload(bias_.data(), bias_.size() * 4);
    }
    const int64_t oh = conv_out_size(s_.h, s_.kh, s_.stride_h, s_.pad_h, s_.dil_h, "h");
    const int64_t ow = conv_out_size(s_.w, s_.kw, s_.stride_w, s_.pad_w, s_.dil_w, "w");
    y_count_ = static_cast<size_t>(s_.batch * s_.co * oh * ow);
    y_ = DeviceBuffer(y_count_ * xb);
    for (int c = 0; c < copies; ++c)
      add_copy(QConv2dArgs{dev(x_dev_.ptr()), dev(q_[c].ptr()), dev(scales_.ptr()), dev(offsets_.ptr()),
                           bias_.empty() ? nullptr : dev(bias_dev_.ptr()), dev(y_.ptr())}
                   .pack());
  }

  // NaN bit patterns (0xffff fp16, 0xffffffff fp32), on the candidate's stream.
  void poison_output(CUstream stream) override { QJIT_CU(cuMemsetD8Async(y_.ptr(), 0xff, y_.bytes(), stream)); }

  Verification verify(double tolerance_scale) override {
    QJIT_CU(cuCtxSynchronize());
    if (ref_.empty()) ref_ = qconv2d_reference(s_, x_, w_, bias_, act_, &magnitude_);
    std::vector<uint8_t> raw(y_.bytes());
    y_.download(raw.data(), raw.size());
    const int64_t k = s_.kh * s_.kw * s_.ci;
    Verification v;
    double err2 = 0, ref2 = 0;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < ref_.size(); ++i) {
      const double got = element_to_double(xtype_, raw.data(), i);
      const double e = std::fabs(got - ref_[i]);
      const double allowed = tolerance_scale * qconv2d_tolerance(magnitude_[i], ref_[i], k, xtype_);
      if (!std::isfinite(got) || e > allowed) {
        if (bad++ == 0) first = static_cast<int64_t>(i);
      }
      if (std::isfinite(e)) {
        err2 += e * e, v.max_abs_error = std::max(v.max_abs_error, e);
      } else {
        err2 = INFINITY, v.max_abs_error = INFINITY;
      }
      ref2 += ref_[i] * ref_[i];
    }
    v.ok = bad == 0;
    v.rel_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    v.tolerance = tolerance_scale * qconv2d_tolerance(0.0, 0.0, k, xtype_);  // the bound's floor; per element it scales
    if (!v.ok) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "%lld of %zu outputs outside the bound; first y[%lld] = %.9g, reference %.9g, allowed ±%.3g "
                    "(magnitude %.3g)",
                    static_cast<long long>(bad), ref_.size(), static_cast<long long>(first),
                    element_to_double(xtype_, raw.data(), static_cast<size_t>(first)), ref_[first],
                    tolerance_scale * qconv2d_tolerance(magnitude_[first], ref_[first], k, xtype_), magnitude_[first]);
      v.message = buf;
    }
    return v;
  }

  std::vector<Baseline> baselines(std::string* why_none) override {
    *why_none =
        "cuDNN has no convolution with int4/int8 weights quantized per block of input channels; peers.py measures "
        "cuDNN's fp16 convolution on the dequantised weights";
    return {};
  }

 private:
  Conv2dShape s_;
  QConvWeights w_;
  std::string xtype_, act_;
  std::vector<float> x_, bias_;
  std::vector<double> ref_, magnitude_;
  size_t y_count_ = 0;
  std::vector<DeviceBuffer> q_;
  DeviceBuffer x_dev_, scales_, offsets_, bias_dev_, y_;
};

}  // namespace

std::unique_ptr<Workload> make_qconv2d_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  return std::make_unique<QConv2dWorkload>(spec, seed, l2_bytes);
}

}  // namespace qjit::tuner
