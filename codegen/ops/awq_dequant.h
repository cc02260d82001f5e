// awq_dequant: packed 4-bit weights (AWQ or GPTQ layout) -> dense [K, N] in
// the scales' type (../shared/seeds/001_*). Host side of
// templates/awq_dequant/awq_dequant.cu; the layouts are described next to the
// reference packers in tuner/reference/awq_dequant.h.
#pragma once
#include "codegen/op.h"

namespace qjit::codegen {

class AwqDequantOp final : public OpDef {
 public:
  std::string name() const override { return "awq_dequant"; }
  std::string summary() const override { return "w[k][n] = (q - z) * s from packed int4 (awq or gptq layout)"; }
  std::vector<ParamDef> params() const override;
  void validate(const nlohmann::json& params) const override;
  std::string template_path(const nlohmann::json&) const override { return "templates/awq_dequant/awq_dequant.cu"; }
  std::vector<ArgDef> args() const override;
  std::vector<nlohmann::json> candidates(const OpSpec& spec, const DeviceLimits& device) const override;
  nlohmann::json default_config(const OpSpec& spec) const override;
  void validate_config(const OpSpec& spec, const nlohmann::json& config) const override;
  std::vector<Constant> constants(const OpSpec& spec, const nlohmann::json& config) const override;
  Plan plan(const OpSpec& spec, const nlohmann::json& config) const override;
  Traffic traffic(const OpSpec& spec) const override;
};

}  // namespace qjit::codegen
