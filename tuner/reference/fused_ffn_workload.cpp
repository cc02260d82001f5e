// fused_ffn's tuning workload: random x/W1/W3, weight copies rotated beyond
// L2, verification against fused_ffn_reference, and the seed's standard path
// (two cuBLAS GEMMs + a SwiGLU kernel) as the baseline.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/ops/fused_ffn.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/cublas.h"
#include "codegen/numeric.h"
#include "tuner/reference/fused_ffn.h"
#include "tuner/reference/fused_ffn_workload.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {


// n random values of scale `scale` stored as `type` ("fp16", "bf16", "fp32").
std::vector<uint8_t> random_tensor(const std::string& type, size_t n, float scale, SplitMix64& rng) {
  const size_t elem = type == "fp32" ? 4 : 2;
  std::vector<uint8_t> out(n * elem);
  for (size_t i = 0; i < n; ++i) {
    const float v = rng.uniform() * scale;
    if (type == "fp32") std::memcpy(&out[i * 4], &v, 4);
    else {
      const uint16_t b = type == "fp16" ? float_to_half(v) : float_to_bf16(v);
      std::memcpy(&out[i * 2], &b, 2);
    }
  }
  return out;
}

double to_double(const std::string& type, const uint8_t* p, size_t i) { return element_to_double(type, p, i); }

class FusedFfnWorkload final : public Workload {
 public:
  FusedFfnWorkload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) : spec_(spec) {
    d_ = spec.get_int("d"), h_ = spec.get_int("h"), m_ = spec.get_int("m");
    const std::string dtype = spec.get_str("dtype");
    xt_ = dtype == "mixed" ? "fp32" : dtype;
    wt_ = dtype == "mixed" ? "fp16" : dtype;
    yt_ = xt_;
    SplitMix64 rng{seed};
    auto x = random_tensor(xt_, m_ * d_, 1.0f, rng);
    // Weights ~ U(-1,1)·2/√d keep the dot products O(1), as in a trained model.
    const float ws = 2.0f / std::sqrt(static_cast<float>(d_));
    auto w1 = random_tensor(wt_, h_ * d_, ws, rng), w3 = random_tensor(wt_, h_ * d_, ws, rng);
    ref_ = fused_ffn_reference(spec, x.data(), w1.data(), w3.data());

    const size_t wbytes = w1.size();
    // Enough copies that a pass over all of them reads > 3× L2 (at least 2, at most 16).
    const int copies = static_cast<int>(std::clamp<size_t>(3 * l2_bytes / (2 * wbytes) + 1, 2, 16));
    x_ = DeviceBuffer(x.size());
    x_.upload(x.data(), x.size());
    y_ = DeviceBuffer(m_ * h_ * (yt_ == "fp32" ? 4 : 2));
    for (int c = 0; c < copies; ++c) {
      w1_.emplace_back(wbytes);
      w3_.emplace_back(wbytes);
      if (c == 0) {
        w1_[0].upload(w1.data(), wbytes);
        w3_[0].upload(w3.data(), wbytes);
      } else {  // same values, different memory: only the addresses must differ
        QJIT_CU(cuMemcpyDtoD(w1_[c].ptr(), w1_[0].ptr(), wbytes));
        QJIT_CU(cuMemcpyDtoD(w3_[c].ptr(), w3_[0].ptr(), wbytes));
      }
    }
    QJIT_CU(cuCtxSynchronize());  // the copies run on the legacy stream; finish them before any launch
    for (int c = 0; c < copies; ++c) {
      FusedFfnArgs a;
      a.x = dev(x_.ptr()), a.w1 = dev(w1_[c].ptr()), a.w3 = dev(w3_[c].ptr()), a.y = dev(y_.ptr());
      add_copy(a.pack());
    }
  }


  void poison_output(CUstream stream) override {
    // On the candidate's own stream: a legacy-stream memset is not ordered
    // with a non-blocking stream and could land after the kernel's writes.
    QJIT_CU(cuMemsetD8Async(y_.ptr(), 0xff, y_.bytes(), stream));  // 0xffff.. is NaN in fp16, bf16 and fp32
  }

  Verification verify(double tolerance_scale) override {
    QJIT_CU(cuCtxSynchronize());
    std::vector<uint8_t> y(y_.bytes());
    y_.download(y.data(), y.size());
    return compare_float(
        ref_, [&](size_t i) { return to_double(yt_, y.data(), i); }, fused_ffn_tolerance(spec_) * tolerance_scale,
        [&](size_t i) { return "y[m=" + std::to_string(i / h_) + "][r=" + std::to_string(i % h_) + "]"; });
  }

  std::vector<Baseline> baselines(std::string* why_none) override;

 private:
  codegen::OpSpec spec_;
  int64_t d_, h_, m_;
  std::string xt_, wt_, yt_;
  std::vector<double> ref_;
  DeviceBuffer x_, y_;
  std::vector<DeviceBuffer> w1_, w3_;
  std::unique_ptr<CublasFfnPath> path_;  // the baseline, built on first use
};

}  // namespace

// The SwiGLU step of the standard path: y = SiLU(g) * u, element-wise, with g
// and u rounded to the activation type as cuBLAS writes them.
constexpr const char* kSwigluSource = R"(extern "C" __global__ void qjit_baseline_swiglu(const T* g, const T* u, T* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = qjit::from_f32<T>(qjit::silu(qjit::to_f32(g[i])) * qjit::to_f32(u[i]));
}
)";

CublasFfnPath::CublasFfnPath(const runtime::Cublas* cublas, const std::string& type, int64_t d, int64_t h, int64_t m)
    : cublas_(cublas),
      type_(type == "fp16" ? CUDA_R_16F : type == "bf16" ? CUDA_R_16BF : CUDA_R_32F),
      d_(d),
      h_(h),
      m_(m) {
  if (cublas_->create(&blas_) != CUBLAS_STATUS_SUCCESS) throw Error("tuner", "cublasCreate failed");
  const size_t elem = type == "fp32" ? 4 : 2;
  g_ = DeviceBuffer(m_ * h_ * elem);
  u_ = DeviceBuffer(m_ * h_ * elem);
  codegen::GeneratedSource src;
  src.file_name = "baseline_swiglu.cu";
  src.kernel_name = "qjit_baseline_swiglu";
  src.template_path = "tuner/reference/fused_ffn_workload.cpp";
  src.text = std::string("#include \"qjit/qjit_common.cuh\"\nusing T = ") + codegen::fused_ffn_types(type).y + ";\n" +
             kSwigluSource;
  auto res = codegen::compile(src, runtime::current_device().arch);
  if (!res.ok) throw Error("nvrtc", "baseline SwiGLU kernel failed to compile", res.log);
  QJIT_CU(cuModuleLoadData(&module_, res.cubin.data()));
  QJIT_CU(cuModuleGetFunction(&swiglu_, module_, "qjit_baseline_swiglu"));
}

CublasFfnPath::~CublasFfnPath() {
  if (blas_) cublas_->destroy(blas_);
  if (module_) runtime::driver().cuModuleUnload(module_);
}

void CublasFfnPath::run(CUdeviceptr x, CUdeviceptr w1, CUdeviceptr w3, CUdeviceptr y, CUstream stream) {
  cublas_->set_stream(blas_, reinterpret_cast<cudaStream_t>(stream));
  for (int which = 0; which < 2; ++which) {
    const CUdeviceptr w = which == 0 ? w1 : w3, out = which == 0 ? g_.ptr() : u_.ptr();
    // G (or U) [m][h] = x[m][d] · W[h][d]ᵀ
    const cublasStatus_t st = runtime::gemm_x_wt(*cublas_, blas_, static_cast<int>(m_), static_cast<int>(h_),
                                                 static_cast<int>(d_), w, x, type_, 0.0f, out, type_);
    if (st != CUBLAS_STATUS_SUCCESS) throw Error("tuner", "cublasGemmEx failed with status " + std::to_string(st));
  }
  CUdeviceptr g = g_.ptr(), u = u_.ptr();
  long long n = m_ * h_;
  void* args[] = {&g, &u, &y, &n};
  const unsigned blocks = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 4096));
  QJIT_CU(cuLaunchKernel(swiglu_, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr));
}

namespace {

std::vector<Baseline> FusedFfnWorkload::baselines(std::string* why_none) {
  if (spec_.get_str("dtype") == "mixed") {
    *why_none = "no cuBLAS path multiplies fp16 weights by fp32 activations";
    return {};
  }
  const runtime::Cublas* cublas = runtime::try_cublas(why_none);
  if (!cublas) return {};
  if (!path_) path_ = std::make_unique<CublasFfnPath>(cublas, xt_, d_, h_, m_);
  Baseline b;
  b.name = "cublas_2gemm_swiglu";
  b.run = [this](int copy, CUstream stream) {
    path_->run(x_.ptr(), w1_[copy].ptr(), w3_[copy].ptr(), y_.ptr(), stream);
  };
  return {b};
}

}  // namespace

std::unique_ptr<Workload> make_fused_ffn_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  if (spec.get_str("weights") == "native") return make_fused_ffn_native_workload(spec, seed, l2_bytes);
  return std::make_unique<FusedFfnWorkload>(spec, seed, l2_bytes);
}

}  // namespace qjit::tuner
