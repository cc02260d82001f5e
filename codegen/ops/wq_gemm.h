// wq_gemm: Y[M, N] = X[M, K] · Wᵀ (+ bias, clamped), W group-quantized along
// K with 2, 3, 4 or 8 bits in qjit's native layout (seeds 001, 002). Host side
// of templates/wq_gemm/wq_gemm_mma.cu (small M; configs in wq_mainloop.h),
// wq_gemm_tiled.cu and wq_gemm_wgmma.cu (large M, "family": "tiled",
// wq_tiled.h, and "wgmma", wq_wgmma.h), and wq_gemm_dense.cu (dequantise,
// then cuBLAS, "family": "cublas"; wq_dense.h); the tuner times them all,
// one table in wq_gemm.cpp describing each family. The layout and
// the zero modes are described next to the reference packer in
// tuner/reference/wq_gemm.h.
//
// M is a bucket: a kernel tuned for m serves every launch with M ≤ m
// (m = 1024 serves any M, looping over rows of x). The runtime picks the
// bucket: the next power of two of M, at most 1024.
#pragma once
#include "codegen/op.h"

namespace qjit::codegen {

class WqGemmOp final : public OpDef {
 public:
  std::string name() const override { return "wq_gemm"; }
  std::string summary() const override { return "Y = X·Wᵀ (+bias, relu/relu6), W 2/3/4/8-bit group-quantized"; }
  std::vector<ParamDef> params() const override;
  void validate(const nlohmann::json& params) const override;
  std::vector<int64_t> m_values_for_rows(int64_t lo, int64_t hi) const override;
  std::vector<ArgDef> args() const override;
  std::string template_path(const nlohmann::json& config) const override;
  bool needs_sm90a(const nlohmann::json& config) const override;
  std::vector<nlohmann::json> candidates(const OpSpec& spec, const DeviceLimits& device) const override;
  nlohmann::json default_config(const OpSpec& spec) const override;
  void validate_config(const OpSpec& spec, const nlohmann::json& config) const override;
  std::vector<Constant> constants(const OpSpec& spec, const nlohmann::json& config) const override;
  Plan plan(const OpSpec& spec, const nlohmann::json& config) const override;
  Traffic traffic(const OpSpec& spec) const override;
};

// The bucket (spec value of m) that serves a launch with `m` rows of x.
int wq_gemm_bucket(int64_t m);

}  // namespace qjit::codegen
