// Host side of wq_gemm's "cublas" family (templates/wq_gemm/wq_gemm_dense.cu):
// the weights dequantised into a dense W[n][k] of the scales' type, then one
// cuBLAS GEMM of x by Wᵀ. It is the path a user without qjit would write, as a
// candidate of the tuner, so the kernel chosen for a bucket is never slower
// than it. It wins where GEMM work dwarfs reading W twice over:
// large M on a GPU whose qjit kernels fall short of cuBLAS (no wgmma family
// below compute capability 9.0).
//
// The plan of one call (codegen/op.h, CublasGemm):
//   1. qjit_wq_gemm: native W → dense W at the start of the workspace;
//   2. cuBLAS: y = x·Wᵀ when nothing follows (with the residual copied into y
//      first and added by the GEMM's β = 1, when it is the only epilogue);
//      else the sums in fp32 into the workspace after W, slab by slab of rows
//      of x, each slab followed by
//      qjit_wq_gemm_epilogue: y = clamp(sum + bias) (+ residual),
//      wq_gemm_epilogue.cuh's store_y, as every other family rounds y once.
// cuBLAS multiplies matrices of one type, so x must be of the scales' type.
#pragma once
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/op.h"
#include "codegen/ops/wq_mainloop.h"

namespace qjit::codegen {

// The dequantisation kernel: blocks of `warps` warps, each warp `tiles`
// native tiles (16 rows × 64 k) along k.
struct WqDenseConfig {
  int warps = 4, tiles = 1;

  static bool is_dense(const nlohmann::json& j);  // "family": "cublas"
  static WqDenseConfig from(const nlohmann::json& j);
  nlohmann::json to_json() const;
};

// Rows of x per cuBLAS call where the sums go through the workspace: the
// bucket's, at most 1024 (the open bucket loops over slabs of them).
int64_t wq_dense_slab_rows(const WqShape& s);
// Whether y needs the epilogue kernel (a bias or a clamp; a residual alone is
// added by the GEMM).
bool wq_dense_needs_epilogue(bool bias, const std::string& act);

std::string wq_dense_problem(const WqShape& s, const WqDenseConfig& c);
std::vector<WqDenseConfig> wq_dense_space(const WqShape& s);
std::vector<Constant> wq_dense_constants(const WqShape& s, const WqDenseConfig& c);
// The plan above; `pointers`: the checks on the call's pointers.
Plan wq_dense_plan(const WqShape& s, const WqDenseConfig& c, bool bias, const std::string& act,
                   std::vector<PointerArg> pointers);

}  // namespace qjit::codegen
