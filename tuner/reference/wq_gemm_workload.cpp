// wq_gemm's tuning workload: random group-quantized W packed in the native
// layout (weight-side tensors rotated beyond L2), random x and bias, M = the
// bucket, verification against the float64 reference (all rows up to 16, a
// sample of rows beyond), and the dense cuBLAS GEMM on W dequantised to the
// scales' type as the baseline (the path a user has without qjit).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include "codegen/error.h"
#include "codegen/numeric.h"
#include "runtime/driver.h"
#include "runtime/cublas.h"
#include "tuner/reference/wq_gemm.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {

class WqGemmWorkload final : public Workload {
 public:
  WqGemmWorkload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes, int64_t rows) : spec_(spec) {
    m_ = rows > 0 ? rows : spec.get_int("m");
    xt_ = spec.get_str("x");
    st_ = spec.get_str("scales");
    zero_ = spec.get_str("zero");
    xb_ = xt_ == "fp32" ? 4 : 2;
    SplitMix64 rng{seed};
    p_ = random_quant(spec.get_int("k"), spec.get_int("n"), spec.get_int("g"), static_cast<int>(spec.get_int("bits")),
                      st_, rng.next());
    const auto qweight = pack_native(p_);
    const auto zeros = zeros_tensor(p_, zero_);
    x_host_ = random_bytes(m_ * p_.k, 1.0f, rng);
    const bool has_bias = spec.get_str("bias") == "yes";
    if (has_bias) bias_host_ = random_bytes(p_.n, 0.5f, rng);
    has_residual_ = spec.get_str("residual") == "yes";
    if (has_residual_) residual_host_ = random_bytes(m_ * p_.n, 1.0f, rng);

    // Rows checked: all up to 16, else the first two, the last two and a spread.
    if (m_ <= 16) {
      for (int64_t r = 0; r < m_; ++r) rows_.push_back(r);
    } else {
      rows_ = {0, 1, m_ / 3, m_ / 2, (2 * m_) / 3 + 1, m_ - 2, m_ - 1};
    }
    ref_ = wq_gemm_reference(spec, rows_, x_host_.data(), p_, has_bias ? bias_host_.data() : nullptr);
    if (has_residual_)
      for (size_t i = 0; i < ref_.size(); ++i) ref_[i] += read(residual_host_.data(), rows_[i / p_.n] * p_.n + i % p_.n);

    const size_t wbytes = qweight.size() * 4 + p_.s.size() * 2 + zeros.size();
    const int copies = static_cast<int>(std::clamp<size_t>(3 * l2_bytes / std::max<size_t>(wbytes, 1) + 1, 1, 16));
    for (int c = 0; c < copies; ++c) {
      q_.emplace_back(qweight.size() * 4);
      q_[c].upload(qweight.data(), qweight.size() * 4);
      s_.emplace_back(p_.s.size() * 2);
      s_[c].upload(p_.s.data(), p_.s.size() * 2);
      z_.emplace_back(std::max<size_t>(zeros.size(), 16));
      if (!zeros.empty()) z_[c].upload(zeros.data(), zeros.size());
    }
    x_ = DeviceBuffer(x_host_.size());
    x_.upload(x_host_.data(), x_host_.size());
    if (has_bias) {
      bias_ = DeviceBuffer(bias_host_.size());
      bias_.upload(bias_host_.data(), bias_host_.size());
    }
    if (has_residual_) {
      residual_ = DeviceBuffer(residual_host_.size());
      residual_.upload(residual_host_.data(), residual_host_.size());
    }
    y_ = DeviceBuffer(m_ * p_.n * xb_);
    for (int c = 0; c < copies; ++c)
      add_copy(WqGemmArgs{dev(x_.ptr()), dev(q_[c].ptr()), dev(s_[c].ptr()), zero_ == "sym" ? nullptr : dev(z_[c].ptr()),
                          has_bias ? dev(bias_.ptr()) : nullptr, has_residual_ ? dev(residual_.ptr()) : nullptr,
                          dev(y_.ptr()), static_cast<int>(m_)}
                   .pack());
  }

  void poison_output(CUstream stream) override { QJIT_CU(cuMemsetD8Async(y_.ptr(), 0xff, y_.bytes(), stream)); }

  Verification verify(double tolerance_scale) override {
    QJIT_CU(cuCtxSynchronize());
    std::vector<uint8_t> y(y_.bytes());
    y_.download(y.data(), y.size());
    // w rounded once to the scales' type (2^-11 or 2^-8 relative), x rounded
    // to it when fp32, fp32 accumulation, y rounded to its type.
    const double tolerance = (st_ == "bf16" || xt_ == "bf16" ? 1.6e-2 : 2e-3) * tolerance_scale;
    const int64_t n = p_.n;
    // ref_ holds the checked rows rows_; element i is y[rows_[i / n]][i % n].
    auto at = [&](size_t i) { return rows_[i / n] * n + static_cast<int64_t>(i % n); };
    return compare_float(
        ref_, [&](size_t i) { return read(y.data(), at(i)); }, tolerance,
        [&](size_t i) { return "y[m=" + std::to_string(rows_[i / n]) + "][n=" + std::to_string(i % n) + "]"; });
  }

  std::vector<Baseline> baselines(std::string* why_none) override {
    cublas_ = runtime::try_cublas(why_none);
    if (!cublas_) return {};
    if (!blas_) build_dense();
    const cudaDataType wt = st_ == "bf16" ? CUDA_R_16BF : CUDA_R_16F;
    Baseline b;
    b.name = std::string("cublas_") + st_ + "_dense";
    // Into y itself where cuBLAS can write y's type and nothing follows the
    // GEMM (then the tuner verifies the baseline too), else into a scratch y
    // (timed only: Baseline::checked).
    // Decided here, not per launch: run() is called inside the timing loop.
    const bool into_y = spec_.get_str("bias") == "no" && spec_.get_str("act") == "none" &&
                        spec_.get_str("residual") == "no" && (xt_ == "fp32" || xt_ == st_);
    const cudaDataType yt = xt_ == "fp32" ? CUDA_R_32F : wt;
    b.run = [this, wt, into_y, yt](int copy, CUstream stream) {
      cublas_->set_stream(blas_, reinterpret_cast<cudaStream_t>(stream));
      const auto& w = dense_[copy % dense_.size()];
      const cublasStatus_t st = runtime::gemm_x_wt(*cublas_, blas_, static_cast<int>(m_), static_cast<int>(p_.n),
                                                   static_cast<int>(p_.k), w.ptr(), dense_x_.ptr(), wt, 0.0f,
                                                   into_y ? y_.ptr() : dense_y_.ptr(), into_y ? yt : wt);
      if (st != CUBLAS_STATUS_SUCCESS) throw Error("tuner", "cublasGemmEx failed with status " + std::to_string(st));
    };
    b.checked = into_y;
    return {b};
  }

  ~WqGemmWorkload() override {
    if (blas_) cublas_->destroy(blas_);
  }

 private:
  std::vector<uint8_t> random_bytes(int64_t count, float scale, SplitMix64& rng) const {
    std::vector<uint8_t> out(count * xb_);
    for (int64_t i = 0; i < count; ++i) {
      const float f = scale * rng.uniform();
      if (xt_ == "fp32") {
        std::memcpy(&out[i * 4], &f, 4);
      } else {
        const uint16_t b = xt_ == "fp16" ? float_to_half(f) : float_to_bf16(f);
        std::memcpy(&out[i * 2], &b, 2);
      }
    }
    return out;
  }
  double read(const uint8_t* base, int64_t i) const { return element_to_double(xt_, base, static_cast<size_t>(i)); }

  // The baseline's tensors: dense W[n][k] in the scales' type (copies rotated
  // beyond L2 like the packed weights), x converted to that type, y.
  void build_dense() {
    if (cublas_->create(&blas_) != CUBLAS_STATUS_SUCCESS) throw Error("tuner", "cublasCreate failed");
    const auto w = dequant_dense_nk(p_, zero_, st_);
    const size_t bytes = w.size() * 2;
    const int copies = static_cast<int>(std::clamp<size_t>(3 * 64 * (size_t{1} << 20) / bytes + 1, 2, 8));
    for (int c = 0; c < copies; ++c) {
      dense_.emplace_back(bytes);
      dense_[c].upload(w.data(), bytes);
    }
    std::vector<uint16_t> x16(m_ * p_.k);
    for (int64_t i = 0; i < m_ * p_.k; ++i) {
      const float f = static_cast<float>(read(x_host_.data(), i));
      x16[i] = st_ == "bf16" ? float_to_bf16(f) : float_to_half(f);
    }
    dense_x_ = DeviceBuffer(x16.size() * 2);
    dense_x_.upload(x16.data(), x16.size() * 2);
    dense_y_ = DeviceBuffer(m_ * p_.n * 2);
  }

  codegen::OpSpec spec_;
  int64_t m_ = 1;
  int xb_ = 2;
  bool has_residual_ = false;
  std::string xt_, st_, zero_;
  PlainQuant p_;
  std::vector<uint8_t> x_host_, bias_host_, residual_host_;
  std::vector<int64_t> rows_;
  std::vector<double> ref_;
  std::vector<DeviceBuffer> q_, s_, z_;
  DeviceBuffer x_, bias_, residual_, y_;
  const runtime::Cublas* cublas_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<DeviceBuffer> dense_;
  DeviceBuffer dense_x_, dense_y_;
};

}  // namespace

std::unique_ptr<Workload> make_wq_gemm_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes,
                                                int64_t rows) {
  return std::make_unique<WqGemmWorkload>(spec, seed, l2_bytes, rows);
}

std::unique_ptr<Workload> make_wq_gemm_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  return make_wq_gemm_workload(spec, seed, l2_bytes, 0);
}

}  // namespace qjit::tuner
