// fp_lut: element-wise y = f(x) by an FP16 lookup table with linear
// interpolation (../shared/seeds/003_*). Host side of templates/fp_lut/fp_lut.cu.
#pragma once
#include "codegen/op.h"
#include "codegen/ops/fp_lut_table.h"

namespace qjit::codegen {

// The table a spec names: fn + cuts ("default", "seed" or 11 fp16 hex values)
// + values ("" = sampled from fn, or 259 fp16 hex values).
lut::Table lut_table_of(const OpSpec& spec);
// The preamble struct `Lut` holding a table's constants (also used by fused_ffn).
Constant lut_struct(const lut::Table& t);

class FpLutOp final : public OpDef {
 public:
  std::string name() const override { return "fp_lut"; }
  std::string summary() const override { return "y = f(x) element-wise by an FP16 table with linear interpolation"; }
  std::vector<ParamDef> params() const override;
  void validate(const nlohmann::json& params) const override;
  std::vector<ArgDef> args() const override;
  std::string template_path(const nlohmann::json&) const override { return "templates/fp_lut/fp_lut.cu"; }
  std::vector<nlohmann::json> candidates(const OpSpec& spec, const DeviceLimits& device) const override;
  nlohmann::json default_config(const OpSpec& spec) const override;
  void validate_config(const OpSpec& spec, const nlohmann::json& config) const override;
  std::vector<Constant> constants(const OpSpec& spec, const nlohmann::json& config) const override;
  Plan plan(const OpSpec& spec, const nlohmann::json& config) const override;
  Traffic traffic(const OpSpec& spec) const override;
};

}  // namespace qjit::codegen
