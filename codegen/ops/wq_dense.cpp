#include "codegen/ops/wq_dense.h"
#include <algorithm>
#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen {

bool WqDenseConfig::is_dense(const nlohmann::json& j) { return config_family(j) == "cublas"; }

WqDenseConfig WqDenseConfig::from(const nlohmann::json& j) {
  if (!is_dense(j) || j.size() != 3)
    throw Error("config", "wq_gemm cublas config needs family, warps and tiles: " + j.dump());
  return {config_int(j, "warps", "wq_gemm cublas config"), config_int(j, "tiles", "wq_gemm cublas config")};
}

nlohmann::json WqDenseConfig::to_json() const { return {{"family", "cublas"}, {"warps", warps}, {"tiles", tiles}}; }

int64_t wq_dense_slab_rows(const WqShape& s) { return std::min<int64_t>(s.m, 1024); }

bool wq_dense_needs_epilogue(bool bias, const std::string& act) { return bias || act != "none"; }

std::string wq_dense_problem(const WqShape& s, const WqDenseConfig& c) {
  if (c.warps != 4 && c.warps != 8) return "warps must be 4 or 8";
  if (c.tiles != 1 && c.tiles != 4) return "tiles must be 1 or 4";
  // cublasGemmEx multiplies A and B of one type: the dense W is in the scales' type.
  if (s.x != s.scales)
    return "cuBLAS multiplies x by W of one type: x (" + s.x + ") must be the scales' type (" + s.scales + ")";
  if (s.matrices != 1) return "one matrix";
  return "";
}

std::vector<WqDenseConfig> wq_dense_space(const WqShape& s) {
  std::vector<WqDenseConfig> out;
  for (int warps : {4, 8})
    for (int tiles : {1, 4})
      if (wq_dense_problem(s, {warps, tiles}).empty()) out.push_back({warps, tiles});
  return out;
}

std::vector<Constant> wq_dense_constants(const WqShape& s, const WqDenseConfig& c) {
  auto out = wq_shape_constants(s);
  out.push_back({"int", "kWarps", std::to_string(c.warps), "tunable: warps per block of the dequantisation"});
  out.push_back({"int", "kTilesPerWarp", std::to_string(c.tiles), "tunable: native tiles (16 x 64) per warp"});
  return out;
}

Plan wq_dense_plan(const WqShape& s, const WqDenseConfig& c, bool bias, const std::string& act,
                   std::vector<PointerArg> pointers) {
  LaunchGeometry g;
  const int64_t tiles = (s.n / 16) * (s.k / 64), per_block = int64_t{c.warps} * c.tiles;
  g.grid[0] = static_cast<unsigned>((tiles + per_block - 1) / per_block);
  g.block[0] = static_cast<unsigned>(32 * c.warps);
  g.programmatic = true;  // W's words, scales and zeros loaded before the wait, W stored after
  // The parameters of every wq_gemm kernel, the workspace last: W is written at its start.
  auto params = arg_params({"x", "qweight", "scales", "zeros", "bias", "residual", "y", "m"});
  params.push_back(workspace_param(0));
  Plan p = single_kernel_plan("qjit_wq_gemm", g, std::move(params), std::move(pointers));
  CublasGemm gemm;
  gemm.x = "x", gemm.y = "y", gemm.rows = "m";
  if (bias) gemm.bias = "bias";
  if (s.residual) gemm.residual = "residual";
  gemm.k = s.k, gemm.n = s.n;
  gemm.bf16 = s.scales == "bf16";
  gemm.w_offset = 0;
  gemm.sums_offset = static_cast<size_t>(s.k * s.n * 2);  // after W, 2 bytes a weight
  if (wq_dense_needs_epilogue(bias, act)) {
    gemm.slab_rows = wq_dense_slab_rows(s);
    gemm.epilogue = static_cast<int>(p.kernels.size());
    LaunchGeometry e;  // the step sets the grid per slab: 256 threads a block, one output each
    e.block[0] = 256;
    p.kernels.push_back({"qjit_wq_gemm_epilogue", KernelDef::Role::step, e, {}, {}});
  }
  p.steps.push_back({PlanStep::Kind::cublas_gemm, -1, gemm});
  // The dense W (2 bytes a weight), then the slab's fp32 sums.
  p.workspace_fixed = static_cast<size_t>(s.k * s.n * 2 + gemm.slab_rows * s.n * 4);
  return p;
}

}  // namespace qjit::codegen
