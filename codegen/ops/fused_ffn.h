// fused_ffn: y = SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ) for decode / small batch
// (../shared/seeds/004_*), on dense W1/W3 or on group-quantized ones in qjit's
// native layout (weights=native: the fusion seed 004 falls back from for AWQ).
// Host side of templates/fused_ffn/*.cu.
#pragma once
#include "codegen/op.h"

namespace qjit::codegen {

// Element types per dtype name: activations x, weights W, output y. "mixed" is
// the seed's path: fp32 activations and output, fp16 weights.
struct FusedFfnTypes {
  const char* x;
  const char* w;
  const char* y;
  int x_bytes, w_bytes, y_bytes;
};
FusedFfnTypes fused_ffn_types(const std::string& dtype);

class FusedFfnOp final : public OpDef {
 public:
  std::string name() const override { return "fused_ffn"; }
  std::string summary() const override { return "y = SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ), W1/W3 dense [h, d] or quantized (native), M = 1..8 rows of x"; }
  std::vector<ParamDef> params() const override;
  void validate(const nlohmann::json& params) const override;
  std::vector<ArgDef> args() const override;
  std::string template_path(const nlohmann::json& config) const override;
  std::vector<nlohmann::json> candidates(const OpSpec& spec, const DeviceLimits& device) const override;
  nlohmann::json default_config(const OpSpec& spec) const override;
  void validate_config(const OpSpec& spec, const nlohmann::json& config) const override;
  std::vector<Constant> constants(const OpSpec& spec, const nlohmann::json& config) const override;
  Plan plan(const OpSpec& spec, const nlohmann::json& config) const override;
  Traffic traffic(const OpSpec& spec) const override;
};

}  // namespace qjit::codegen
