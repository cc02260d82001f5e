// w8a8_gemm's tuning workload: x drawn per row at magnitudes from 1e-3 to 30
// with edge rows (a constant row: the degenerate |scale| ≤ 1e-5 block; a
// row of zeros; one outlier per block), W quantized by the spec's rule,
// weight copies rotated beyond L2. Verification: every element of the
// checked rows within w8a8_tolerance of the float64 reference computed from
// the CPU's own quantization of the same x (so a GPU code off by one fails:
// its error, |qW|·sA·sB, is orders above the tolerance). Baselines, timed
// only: cuBLAS fp16 on the same shape, and cuBLAS's int8 GEMM with no
// scales at all (what torch._int_mm runs).
//
// format=e4m3: x's blocks and W's 128 × 128 tiles each get a power-of-two
// factor of their own (2^-3 .. 2^3), so that a scale read from the wrong
// block or tile is far off; W quantized by quantize_fp8_tiles; every
// element within w8a8_fp8_tolerance of fp8_gemm_check_reference (the
// tensor cores' 13-bit accumulation inside a block is a bounded error, not
// an exact one). Baseline: cuBLAS fp16.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "codegen/error.h"
#include "codegen/numeric.h"
#include "runtime/cublas.h"
#include "runtime/driver.h"
#include "tuner/reference/w8a8_fp8.h"
#include "tuner/reference/w8a8_gemm.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {

class W8a8GemmWorkload final : public Workload {
 public:
  W8a8GemmWorkload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes, int64_t rows) {
    m_ = rows > 0 ? rows : spec.get_int("m");
    n_ = spec.get_int("n"), k_ = spec.get_int("k"), block_ = spec.get_int("block");
    xt_ = spec.get_str("x");
    act_ = spec.get_str("act");
    xb_ = xt_ == "fp32" ? 4 : 2;
    fp8_ = spec.get_str("format") == "e4m3";
    SplitMix64 rng{seed};

    // x in its own type, then widened exactly as the GPU reads it.
    std::vector<float> xf(m_ * k_);
    for (int64_t r = 0; r < m_; ++r) {
      const float amp = std::pow(10.0f, -3.0f + 4.5f * static_cast<float>(rng.next() % 1000) / 1000.0f);
      const float shift = (rng.next() % 4 == 0) ? amp * rng.uniform() : 0.0f;  // some rows far from centred
      for (int64_t i = 0; i < k_; ++i) xf[r * k_ + i] = shift + amp * rng.uniform();
      if (k_ >= block_) xf[r * k_ + (rng.next() % k_)] = 8 * amp;  // an outlier
      if (fp8_)
        for (int64_t i = 0; i < k_; ++i) xf[r * k_ + i] *= tile_factor(r, i / block_);
    }
    if (m_ >= 3) {
      std::fill(xf.begin() + 1 * k_, xf.begin() + 2 * k_, 0.375f);  // constant: the degenerate block
      std::fill(xf.begin() + 2 * k_, xf.begin() + 3 * k_, 0.0f);
    }

    std::vector<float> wf(n_ * k_);
    for (int64_t c = 0; c < n_; ++c) {
      const float amp = 0.01f + 0.2f * static_cast<float>(rng.next() % 1000) / 1000.0f;
      for (int64_t i = 0; i < k_; ++i) wf[c * k_ + i] = amp * rng.uniform() + (c % 7 == 0 ? amp / 2 : 0.0f);
      if (fp8_)
        for (int64_t i = 0; i < k_; ++i) wf[c * k_ + i] *= tile_factor(c / 128 + 1, i / block_);
    }
    if (xt_ == "fp16") keep_y_in_fp16_range(xf, wf);
    x_host_ = encode(xf);
    const std::vector<float> xw = widen_to_float(xt_, x_host_.data(), xf.size());
    std::vector<float> bias;
    if (spec.get_str("bias") == "yes") {
      bias.resize(n_);
      for (auto& b : bias) b = widen_one(2.0f * rng.uniform());
      const auto bytes = encode(bias);
      bias_ = DeviceBuffer(bytes.size());
      bias_.upload(bytes.data(), bytes.size());
    }

    // Rows checked: all up to 16 (and up to 1024 when a test asks for a number of rows), else the
    // edge rows, the last two and a spread.
    if (m_ <= 16 || (rows > 0 && m_ <= 1024)) {
      for (int64_t r = 0; r < m_; ++r) rows_.push_back(r);
    } else {
      rows_ = {0, 1, 2, m_ / 3, m_ / 2, (2 * m_) / 3 + 1, m_ - 2, m_ - 1};
    }
    x_ = DeviceBuffer(x_host_.size());
    x_.upload(x_host_.data(), x_host_.size());
    y_ = DeviceBuffer(m_ * n_ * xb_);
    if (fp8_) {
      fp8_weights(xw, wf, bias, l2_bytes);
    } else {
      int8_weights(spec, xw, wf, bias, l2_bytes);
    }
  }

  // fp16 y holds at most 65504: a row of x whose worst case Σ|x|·max|w| (every product of one sign)
  // passes 2^14 is scaled down by a power of two until it does not, so no reference value overflows
  // y (an overflow is inf on the GPU, which no tolerance accepts). Large K, shifted rows, W's offset
  // columns and e4m3's tile factors together reach past it (e4m3, K = 4096: |y| ≈ 67500).
  void keep_y_in_fp16_range(std::vector<float>& xf, const std::vector<float>& wf) const {
    std::vector<double> wmax(k_, 0.0);
    for (int64_t c = 0; c < n_; ++c)
      for (int64_t i = 0; i < k_; ++i) wmax[i] = std::max(wmax[i], static_cast<double>(std::fabs(wf[c * k_ + i])));
    for (int64_t r = 0; r < m_; ++r) {
      double bound = 0;
      for (int64_t i = 0; i < k_; ++i) bound += std::fabs(xf[r * k_ + i]) * wmax[i];
      int halvings = 0;
      while (bound > 16384.0) bound /= 2, ++halvings;
      if (halvings)
        for (int64_t i = 0; i < k_; ++i) xf[r * k_ + i] = std::ldexp(xf[r * k_ + i], -halvings);
    }
  }

  // format=e4m3: a power of two in 2^-3 .. 2^3 for block b of row (or tile row) r.
  static float tile_factor(int64_t r, int64_t b) { return std::ldexp(1.0f, static_cast<int>((3 * r + 5 * b) % 7) - 3); }

  // W's native tensors: codes [n][k]; scale, offset, sum block-major [k/block][n].
  void int8_weights(const codegen::OpSpec& spec, const std::vector<float>& xw, const std::vector<float>& wf,
                    const std::vector<float>& bias, size_t l2_bytes) {
    const BlockRule rule_a = spec.get_str("quant_a") == "offset" ? BlockRule::offset : BlockRule::symmetric;
    const BlockRule rule_w = spec.get_str("quant_w") == "offset" ? BlockRule::offset : BlockRule::symmetric;
    const auto a = quantize_activations(xw, m_, k_, block_, rule_a);
    const BlockQuantized w = pack_weights(wf, n_, k_, block_, rule_w);
    ref_ = w8a8_gemm_reference(a, w, bias, act_, rows_);
    const int64_t nb = k_ / block_;
    auto block_major = [&](const auto& v) {
      std::vector<std::remove_cv_t<std::remove_reference_t<decltype(v[0])>>> out(v.size());
      for (int64_t c = 0; c < n_; ++c)
        for (int64_t b = 0; b < nb; ++b) out[b * n_ + c] = v[c * nb + b];
      return out;
    };
    const auto scale = block_major(w.scale), offset = block_major(w.offset);
    const auto sum = block_major(w.sum);
    const size_t wbytes = w.q.size() + 12 * scale.size();
    const int copies = static_cast<int>(std::clamp<size_t>(3 * l2_bytes / std::max<size_t>(wbytes, 1) + 1, 1, 16));
    for (int c = 0; c < copies; ++c) {
      Weights cw{DeviceBuffer(w.q.size()), DeviceBuffer(scale.size() * 4), DeviceBuffer(offset.size() * 4),
                 DeviceBuffer(sum.size() * 4)};
      cw.q.upload(w.q.data(), w.q.size());
      cw.scale.upload(scale.data(), scale.size() * 4);
      cw.offset.upload(offset.data(), offset.size() * 4);
      cw.sum.upload(sum.data(), sum.size() * 4);
      weights_.push_back(std::move(cw));
    }
    const bool offset_w = rule_w == BlockRule::offset, offset_a = rule_a == BlockRule::offset;
    for (const auto& cw : weights_) {
      W8a8GemmArgs args;
      args.x = dev(x_.ptr()), args.wq = dev(cw.q.ptr()), args.w_scale = dev(cw.scale.ptr());
      args.w_offset = offset_w ? dev(cw.offset.ptr()) : nullptr;
      args.w_sum = offset_a ? dev(cw.sum.ptr()) : nullptr;
      args.bias = bias.empty() ? nullptr : dev(bias_.ptr());
      args.y = dev(y_.ptr()), args.m = static_cast<int>(m_);
      add_copy(args.pack());
    }
  }

  // W's e4m3 tensors: codes [n][k]; tile scales [k/128][n/128] (fp8_gemm's are [n/128][k/128]).
  void fp8_weights(const std::vector<float>& xw, const std::vector<float>& wf, const std::vector<float>& bias,
                   size_t l2_bytes) {
    const Fp8Rows a = quantize_fp8_rows(xw, m_, k_, block_);
    const Fp8Tiles w = quantize_fp8_tiles(wf, n_, k_, 128, block_);
    fp8_ref_ = fp8_gemm_check_reference(a, w, bias, act_, rows_);
    const int64_t tn = n_ / 128, tk = k_ / block_;
    std::vector<float> scale(w.scale.size());
    for (int64_t i = 0; i < tn; ++i)
      for (int64_t b = 0; b < tk; ++b) scale[b * tn + i] = w.scale[i * tk + b];
    const size_t wbytes = w.q.size() + 4 * scale.size();
    const int copies = static_cast<int>(std::clamp<size_t>(3 * l2_bytes / std::max<size_t>(wbytes, 1) + 1, 1, 16));
    for (int c = 0; c < copies; ++c) {
      Weights cw{DeviceBuffer(w.q.size()), DeviceBuffer(scale.size() * 4), {}, {}};
      cw.q.upload(w.q.data(), w.q.size());
      cw.scale.upload(scale.data(), scale.size() * 4);
      weights_.push_back(std::move(cw));
    }
    for (const auto& cw : weights_) {
      W8a8GemmArgs args;
      args.x = dev(x_.ptr()), args.wq = dev(cw.q.ptr()), args.w_scale = dev(cw.scale.ptr());
      args.bias = bias.empty() ? nullptr : dev(bias_.ptr());
      args.y = dev(y_.ptr()), args.m = static_cast<int>(m_);
      add_copy(args.pack());
    }
  }

  // On the candidate's stream (a legacy-stream memset is not ordered with it).
  void poison_output(CUstream stream) override { QJIT_CU(cuMemsetD8Async(y_.ptr(), 0xff, y_.bytes(), stream)); }

  Verification verify(double tolerance_scale) override {
    QJIT_CU(cuCtxSynchronize());
    std::vector<unsigned char> got(y_.bytes());
    y_.download(got.data(), got.size());
    Verification v;
    v.ok = true;
    double err2 = 0, ref2 = 0;
    int64_t bad = 0;
    const int64_t blocks = k_ / block_;
    const std::vector<double>& ys = fp8_ ? fp8_ref_.y : ref_.y;
    for (size_t i = 0; i < ys.size(); ++i) {
      const int64_t r = rows_[i / n_], c = static_cast<int64_t>(i % n_);
      const double g = element_to_double(xt_, got.data(), static_cast<size_t>(r * n_ + c));
      const double want = ys[i], e = std::fabs(g - want);
      const double tol =
          tolerance_scale * (fp8_ ? w8a8_fp8_tolerance(fp8_ref_.magnitude[i], fp8_ref_.tc_magnitude[i], want, blocks, xt_)
                                  : w8a8_tolerance(ref_.magnitude[i], want, blocks, xt_));
      err2 += (g - want) * (g - want), ref2 += want * want;
      v.max_abs_error = std::max(v.max_abs_error, std::isfinite(e) ? e : INFINITY);
      if (!(e <= tol) && bad++ == 0) {
        char buf[240];
        std::snprintf(buf, sizeof buf, "y[m=%lld][n=%lld] = %.9g, reference %.9g (error %.3g > tolerance %.3g)",
                      static_cast<long long>(r), static_cast<long long>(c), g, want, e, tol);
        v.message = buf;
      }
    }
    v.rel_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    if (bad) {
      v.ok = false;
      v.message = std::to_string(bad) + " of " + std::to_string(ys.size()) + " checked elements off; first " +
                  v.message;
    }
    return v;
  }

  std::vector<Baseline> baselines(std::string* why_none) override {
    cublas_ = runtime::try_cublas(why_none);
    if (!cublas_) return {};
    if (cublas_->create(&blas_) != CUBLAS_STATUS_SUCCESS) throw Error("tuner", "cublasCreate failed");
    // Dense operands of the same shape; their values do not matter for the time.
    a16_ = DeviceBuffer(m_ * k_ * 2), w16_ = DeviceBuffer(n_ * k_ * 2), y16_ = DeviceBuffer(m_ * n_ * 2);
    a8_ = DeviceBuffer(m_ * k_), y32_ = DeviceBuffer(m_ * n_ * 4);
    for (const DeviceBuffer* b : {&a16_, &w16_, &a8_}) QJIT_CU(cuMemsetD8(b->ptr(), 0x11, b->bytes()));
    std::vector<Baseline> out;
    Baseline fp16;
    fp16.name = "cublas_fp16";
    fp16.checked = false;
    fp16.run = [this](int, CUstream stream) {
      cublas_->set_stream(blas_, reinterpret_cast<cudaStream_t>(stream));
      check(runtime::gemm_x_wt(*cublas_, blas_, static_cast<int>(m_), static_cast<int>(n_), static_cast<int>(k_),
                               w16_.ptr(), a16_.ptr(), CUDA_R_16F, 0.0f, y16_.ptr(), CUDA_R_16F),
            "fp16");
    };
    out.push_back(fp16);
    // cuBLAS's integer GEMM takes the transposed-A ("TN") form with k a multiple of 4. (cublasGemmEx has no
    // FP8 path: for format=e4m3, peers.py times torch._scaled_mm.)
    if (k_ % 4 == 0 && !fp8_) {
      Baseline i8;
      i8.name = "cublas_int8_no_scales";
      i8.checked = false;
      i8.run = [this](int copy, CUstream stream) {
        cublas_->set_stream(blas_, reinterpret_cast<cudaStream_t>(stream));
        const int one = 1, zero = 0;
        const auto& w = weights_[static_cast<size_t>(copy) % weights_.size()];
        check(cublas_->gemm_ex(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_), static_cast<int>(m_),
                               static_cast<int>(k_), &one, reinterpret_cast<void*>(w.q.ptr()), CUDA_R_8I,
                               static_cast<int>(k_), reinterpret_cast<void*>(a8_.ptr()), CUDA_R_8I,
                               static_cast<int>(k_), &zero, reinterpret_cast<void*>(y32_.ptr()), CUDA_R_32I,
                               static_cast<int>(n_), CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT),
              "int8");
      };
      out.push_back(i8);
    }
    return out;
  }

  ~W8a8GemmWorkload() override {
    if (blas_) cublas_->destroy(blas_);
  }

 private:
  struct Weights {
    DeviceBuffer q, scale, offset, sum;
  };

  static void check(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS)
      throw Error("tuner", std::string("cublasGemmEx (") + what + ") failed with status " + std::to_string(st));
  }
  // v as x's type holds it (the bias is stored in that type).
  float widen_one(float v) const {
    if (xt_ == "fp16") return half_to_float(float_to_half(v));
    if (xt_ == "bf16") return bf16_to_float(float_to_bf16(v));
    return v;
  }
  // v in x's type, as raw bytes.
  std::vector<unsigned char> encode(const std::vector<float>& v) const {
    std::vector<unsigned char> bytes(v.size() * xb_);
    for (size_t i = 0; i < v.size(); ++i) {
      if (xt_ == "fp32") {
        std::memcpy(bytes.data() + 4 * i, &v[i], 4);
      } else {
        const uint16_t h = xt_ == "bf16" ? float_to_bf16(v[i]) : float_to_half(v[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    return bytes;
  }

  int64_t m_ = 0, n_ = 0, k_ = 0, block_ = 0, xb_ = 2;
  bool fp8_ = false;
  std::string xt_, act_;
  std::vector<unsigned char> x_host_;
  std::vector<int64_t> rows_;
  W8A8Result ref_;       // int8
  Fp8GemmResult fp8_ref_;  // format=e4m3
  std::vector<Weights> weights_;
  DeviceBuffer x_, y_, bias_;
  const runtime::Cublas* cublas_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  DeviceBuffer a16_, w16_, y16_, a8_, y32_;
};

}  // namespace

std::unique_ptr<Workload> make_w8a8_gemm_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes,
                                                  int64_t rows) {
  return std::make_unique<W8a8GemmWorkload>(spec, seed, l2_bytes, rows);
}

std::unique_ptr<Workload> make_w8a8_gemm_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  return make_w8a8_gemm_workload(spec, seed, l2_bytes, 0);
}

}  // namespace qjit::tuner
