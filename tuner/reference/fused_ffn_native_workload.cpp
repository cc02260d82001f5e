// fused_ffn's workload on quantized weights (weights=native): random W1 and
// W3 group-quantized and packed in the native layout (weight-side tensors
// rotated beyond L2), random x, verification against
// fused_ffn_native_reference, and the standard path on the same weights
// dequantised to the scales' type (two cuBLAS GEMMs + SwiGLU) as the baseline.
#include <algorithm>
#include <array>
#include <cstring>
#include "codegen/error.h"
#include "codegen/numeric.h"
#include "runtime/driver.h"
#include "tuner/reference/fused_ffn.h"
#include "tuner/reference/fused_ffn_workload.h"
#include "tuner/reference/wq_gemm.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {


// One matrix's device tensors in the kernel's form.
struct PackedMatrix {
  DeviceBuffer q, s, z;
};

class FusedFfnNativeWorkload final : public Workload {
 public:
  FusedFfnNativeWorkload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) : spec_(spec) {
    d_ = spec.get_int("d"), h_ = spec.get_int("h"), m_ = spec.get_int("m");
    xt_ = spec.get_str("dtype"), st_ = spec.get_str("scales"), zero_ = spec.get_str("zero");
    const int64_t g = spec.get_int("g");
    const int bits = static_cast<int>(spec.get_int("bits"));
    SplitMix64 rng{seed};
    w_[0] = random_quant(d_, h_, g, bits, st_, rng.next());
    w_[1] = random_quant(d_, h_, g, bits, st_, rng.next());
    x_host_.resize(m_ * d_ * (xt_ == "fp32" ? 4 : 2));
    for (int64_t i = 0; i < m_ * d_; ++i) store_element(xt_, x_host_.data(), i, rng.uniform());
    ref_ = fused_ffn_native_reference(spec, x_host_.data(), w_[0], w_[1]);

    std::array<std::vector<uint32_t>, 2> q = {pack_native(w_[0]), pack_native(w_[1])};
    std::array<std::vector<uint8_t>, 2> z = {zeros_tensor(w_[0], zero_), zeros_tensor(w_[1], zero_)};
    const size_t wbytes = 2 * (q[0].size() * 4 + w_[0].s.size() * 2 + z[0].size());
    const int copies = static_cast<int>(std::clamp<size_t>(3 * l2_bytes / std::max<size_t>(wbytes, 1) + 1, 1, 16));
    packed_.resize(copies);
    for (int c = 0; c < copies; ++c)
      for (int i = 0; i < 2; ++i) {
        auto& t = packed_[c][i];
        t.q = DeviceBuffer(q[i].size() * 4);
        t.q.upload(q[i].data(), t.q.bytes());
        t.s = DeviceBuffer(w_[i].s.size() * 2);
        t.s.upload(w_[i].s.data(), t.s.bytes());
        t.z = DeviceBuffer(std::max<size_t>(z[i].size(), 16));
        if (!z[i].empty()) t.z.upload(z[i].data(), z[i].size());
      }
    x_ = DeviceBuffer(x_host_.size());
    x_.upload(x_host_.data(), x_host_.size());
    y_ = DeviceBuffer(m_ * h_ * (xt_ == "fp32" ? 4 : 2));
    for (int c = 0; c < copies; ++c) {
      const auto& w = packed_[c];
      const bool sym = zero_ == "sym";
      add_copy(FusedFfnArgs{dev(x_.ptr()), dev(w[0].q.ptr()), dev(w[0].s.ptr()), sym ? nullptr : dev(w[0].z.ptr()),
                            dev(w[1].q.ptr()), dev(w[1].s.ptr()), sym ? nullptr : dev(w[1].z.ptr()), dev(y_.ptr())}
                   .pack());
    }
  }

  void poison_output(CUstream stream) override { QJIT_CU(cuMemsetD8Async(y_.ptr(), 0xff, y_.bytes(), stream)); }

  Verification verify(double tolerance_scale) override {
    QJIT_CU(cuCtxSynchronize());
    std::vector<uint8_t> y(y_.bytes());
    y_.download(y.data(), y.size());
    return compare_float(
        ref_, [&](size_t i) { return element_to_double(xt_, y.data(), i); },
        fused_ffn_tolerance(spec_) * tolerance_scale,
        [&](size_t i) { return "y[m=" + std::to_string(i / h_) + "][n=" + std::to_string(i % h_) + "]"; });
  }

  std::vector<Baseline> baselines(std::string* why_none) override {
    const runtime::Cublas* cublas = runtime::try_cublas(why_none);
    if (!cublas) return {};
    if (!path_) build_dense(cublas);
    Baseline b;
    b.name = std::string("cublas_") + st_ + "_2gemm_swiglu";
    // Into y itself when y has the scales' type (then the tuner verifies the baseline too).
    b.run = [this](int copy, CUstream stream) {
      const auto& w = dense_[copy % dense_.size()];
      path_->run(dense_x_.ptr(), w[0].ptr(), w[1].ptr(), xt_ == st_ ? y_.ptr() : dense_y_.ptr(), stream);
    };
    b.checked = xt_ == st_;
    return {b};
  }

 private:
  static void store_element(const std::string& type, uint8_t* base, int64_t i, float v) {
    if (type == "fp32") {
      std::memcpy(base + 4 * i, &v, 4);
    } else {
      const uint16_t b = type == "fp16" ? float_to_half(v) : float_to_bf16(v);
      std::memcpy(base + 2 * i, &b, 2);
    }
  }

  // What a user without qjit runs: W1 and W3 dequantised once to the scales'
  // type [h][d] (copies rotated beyond L2), x in that type, the standard path.
  void build_dense(const runtime::Cublas* cublas) {
    path_ = std::make_unique<CublasFfnPath>(cublas, st_, d_, h_, m_);
    const std::array<std::vector<uint16_t>, 2> w = {dequant_dense_nk(w_[0], zero_, st_),
                                                    dequant_dense_nk(w_[1], zero_, st_)};
    const size_t bytes = w[0].size() * 2;
    const int copies = static_cast<int>(std::clamp<size_t>(3 * 64 * (size_t{1} << 20) / (2 * bytes) + 1, 2, 8));
    dense_.resize(copies);
    for (auto& c : dense_)
      for (int i = 0; i < 2; ++i) {
        c[i] = DeviceBuffer(bytes);
        c[i].upload(w[i].data(), bytes);
      }
    std::vector<uint8_t> x16(m_ * d_ * 2);
    for (int64_t i = 0; i < m_ * d_; ++i)
      store_element(st_, x16.data(), i, static_cast<float>(element_to_double(xt_, x_host_.data(), i)));
    dense_x_ = DeviceBuffer(x16.size());
    dense_x_.upload(x16.data(), x16.size());
    dense_y_ = DeviceBuffer(m_ * h_ * 2);
  }

  codegen::OpSpec spec_;
  int64_t d_ = 0, h_ = 0, m_ = 1;
  std::string xt_, st_, zero_;
  std::array<PlainQuant, 2> w_;
  std::vector<uint8_t> x_host_;
  std::vector<double> ref_;
  std::vector<std::array<PackedMatrix, 2>> packed_;
  DeviceBuffer x_, y_;
  std::unique_ptr<CublasFfnPath> path_;
  std::vector<std::array<DeviceBuffer, 2>> dense_;
  DeviceBuffer dense_x_, dense_y_;
};

}  // namespace

std::unique_ptr<Workload> make_fused_ffn_native_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  return std::make_unique<FusedFfnNativeWorkload>(spec, seed, l2_bytes);
}

}  // namespace qjit::tuner
