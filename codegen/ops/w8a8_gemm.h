// w8a8_gemm: Y[m][n] = clamp(dequant(quant(X)[m][k] · Wq[n][k]ᵀ) + bias[n])
// with X quantized online per row and block of k (seed 002's QuantA, or the
// symmetric per-token-group form) and W int8 per output channel and block;
// or, with format=e4m3, both in FP8 e4m3 (x per row and block of 128, W per
// 128 × 128 tile: DeepGEMM's format, sm_89+). Host side of
// templates/w8a8_gemm/; the quantizers and the float64 references are
// tuner/reference/w8a8_quant.h, w8a8_gemm.h and w8a8_fp8.h.
//
// Every config's plan is two kernels on the caller's stream:
//   qjit_w8a8_quant_a  X → codes, scale, offset and Σcodes per (row, block),
//                      into the plan's workspace (bit-exact with the reference);
//   qjit_w8a8_gemm     int8 block products (exact int32), each block's
//                      promoted to fp32 in registers with the seed's
//                      DequantAndAcc formula (e4m3: fp32 block products
//                      promoted with sA·sB); bias, clamp, y. Families:
//                      tiled (mma.sync, sm_80+), wgmma (sm_90a, tuned on
//                      compute capability 9.0 only, buckets of 128 rows
//                      and more) and simple (one thread per element).
// The workspace holds one chunk of `m` rows (the spec's bucket); the runtime
// runs a call of more rows chunk by chunk (only bucket 4096 serves M > m).
#pragma once
#include "codegen/op.h"

namespace qjit::codegen {

class W8a8GemmOp final : public OpDef {
 public:
  std::string name() const override { return "w8a8_gemm"; }
  std::string summary() const override {
    return "y = dequant(quant(x) · Wq^T) + bias: x quantized online per row and block of k, int8 block GEMM";
  }
  std::vector<ParamDef> params() const override;
  void validate(const nlohmann::json& params) const override;
  ArchNeed arch_need(const OpSpec& spec) const override;
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

// The bucket serving a call of m rows: the next power of two, at most 4096
// (4096 serves any M, a chunk of 4096 rows at a time).
int w8a8_gemm_bucket(int64_t m);

// Where the quantized activations of one chunk of `rows` rows sit in the
// plan's workspace (bytes): codes [rows][k], then per block and row
// (block-major, [k/block][rows]) scale, offset (float32) and Σcodes (int32).
struct W8a8Workspace {
  size_t codes = 0, scale = 0, offset = 0, sum = 0, total = 0;
};
W8a8Workspace w8a8_workspace(int64_t rows, int64_t k, int64_t block);

}  // namespace qjit::codegen
