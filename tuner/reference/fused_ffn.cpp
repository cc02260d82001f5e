#include "tuner/reference/fused_ffn.h"
#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include "codegen/numeric.h"
#include <functional>
#include <memory>
#include "codegen/ops/wq_gemm.h"
#include "tuner/reference/fp_lut.h"
#include "tuner/reference/wq_gemm.h"

namespace qjit::tuner {
namespace {

// Widens element i of a buffer of `dtype` ("fp16", "bf16", "fp32") to double.
struct Reader {
  const void* data;
  int kind;  // 0 fp32, 1 fp16, 2 bf16
  double operator()(size_t i) const {
    switch (kind) {
      case 1: return half_to_float(static_cast<const uint16_t*>(data)[i]);
      case 2: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
      default: return static_cast<const float*>(data)[i];
    }
  }
};

int kind_of(const std::string& t) { return t == "fp16" ? 1 : t == "bf16" ? 2 : 0; }

// The gate activation: SiLU in float64, or the FP16 table the kernel bakes
// in, applied to the gate rounded to fp32 (the kernel's accumulator type).
std::function<double(double)> activation_of(const codegen::OpSpec& spec) {
  const std::string act = spec.params.value("act", "silu");
  if (act == "silu") return [](double g) { return g / (1.0 + std::exp(-g)); };
  auto table = std::make_shared<codegen::lut::Table>(codegen::lut::build(
      "silu", act == "silu_lut_seed" ? codegen::lut::seed_silu_cuts() : codegen::lut::default_cuts("silu")));
  return [table](double g) { return static_cast<double>(lut_apply(*table, static_cast<float>(g))); };
}

}  // namespace

std::vector<double> fused_ffn_reference(const codegen::OpSpec& spec, const void* x, const void* w1, const void* w3,
                                        int threads) {
  const int64_t d = spec.get_int("d"), h = spec.get_int("h"), m = spec.get_int("m");
  const std::string dtype = spec.get_str("dtype");
  const int xk = dtype == "mixed" ? 0 : kind_of(dtype), wk = dtype == "mixed" ? 1 : kind_of(dtype);
  std::vector<double> xd(m * d);
  for (int64_t i = 0; i < m * d; ++i) xd[i] = Reader{x, xk}(i);
  std::vector<double> y(m * h);
  const auto activation = activation_of(spec);
  auto rows = [&](int64_t begin, int64_t end) {
    const Reader a{w1, wk}, b{w3, wk};
    std::vector<double> ga(d), ub(d);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t k = 0; k < d; ++k) ga[k] = a(r * d + k), ub[k] = b(r * d + k);
      for (int64_t i = 0; i < m; ++i) {
        double g = 0, u = 0;
        for (int64_t k = 0; k < d; ++k) {
          g += ga[k] * xd[i * d + k];
          u += ub[k] * xd[i * d + k];
        }
        y[i * h + r] = activation(g) * u;
      }
    }
  };
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, h));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(rows, h * t / threads, h * (t + 1) / threads);
  for (auto& th : pool) th.join();
  return y;
}

std::vector<double> fused_ffn_native_reference(const codegen::OpSpec& spec, const uint8_t* x, const PlainQuant& w1,
                                               const PlainQuant& w3) {
  const int64_t m = spec.get_int("m"), h = spec.get_int("h");
  // Each product is wq_gemm's: the same dequantisation, in float64.
  const codegen::OpSpec product = codegen::make_spec(
      "wq_gemm", {{"k", spec.get_int("d")}, {"n", h}, {"m", codegen::wq_gemm_bucket(m)}, {"bits", spec.get_int("bits")},
                  {"g", spec.get_int("g")}, {"zero", spec.get_str("zero")}, {"scales", spec.get_str("scales")},
                  {"x", spec.get_str("dtype")}});
  std::vector<int64_t> rows(m);
  for (int64_t r = 0; r < m; ++r) rows[r] = r;
  const auto gate = wq_gemm_reference(product, rows, x, w1, nullptr);
  const auto up = wq_gemm_reference(product, rows, x, w3, nullptr);
  const auto activation = activation_of(spec);
  std::vector<double> y(m * h);
  for (size_t i = 0; i < y.size(); ++i) y[i] = activation(gate[i]) * up[i];
  return y;
}

double fused_ffn_tolerance(const codegen::OpSpec& spec) {
  if (spec.get_str("weights") == "native") {
    // wq_gemm's bound for each product (fp16: the output rounding and x
    // rounded to fp16 when fp32; bf16: 2^-8), the same for their product.
    return spec.get_str("scales") == "bf16" || spec.get_str("dtype") == "bf16" ? 1.6e-2 : 2e-3;
  }
  // The output rounding dominates: half an ulp relative is 2^-11 (fp16) and
  // 2^-8 (bf16); fp32 outputs see only fp32 accumulation-order error.
  const std::string t = spec.get_str("dtype");
  if (t == "fp16") return 1e-3;
  if (t == "bf16") return 8e-3;
  // An FP16 table looks the gate up at fp16 resolution: a gate whose fp32 sum
  // differs from the reference's by accumulation order can land on the
  // neighbouring fp16 input, an error of up to the slope times 2^-11 relative.
  if (spec.params.value("act", "silu") != "silu") return 1e-3;
  return 1e-5;  // fp32, mixed
}

}  // namespace qjit::tuner
