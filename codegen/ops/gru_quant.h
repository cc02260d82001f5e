// gru_quant: the fixed-point GRU forward of ../shared/seeds/000_* with every
// shift, zero point and LUT segment of its params document
// (codegen/ops/gru_params.h) baked into the source. Host side of
// templates/gru_quant/; the CPU definition is tuner/reference/gru_quant.h.
#pragma once
#include <string>

#include "codegen/op.h"
#include "codegen/ops/gru_params.h"

namespace qjit::codegen {

class GruQuantOp final : public OpDef {
 public:
  std::string name() const override { return "gru_quant"; }
  std::string summary() const override { return "bit-exact fixed-point GRU forward over T steps (seed 000)"; }
  std::vector<ParamDef> params() const override;
  void validate(const nlohmann::json& params) const override;
  std::string template_path(const nlohmann::json& config) const override;
  bool needs_sm90a(const nlohmann::json& config) const override;
  std::vector<ArgDef> args() const override;
  std::vector<nlohmann::json> candidates(const OpSpec& spec, const DeviceLimits& device) const override;
  nlohmann::json default_config(const OpSpec& spec) const override;
  void validate_config(const OpSpec& spec, const nlohmann::json& config) const override;
  std::vector<Constant> constants(const OpSpec& spec, const nlohmann::json& config) const override;
  Plan plan(const OpSpec& spec, const nlohmann::json& config) const override;
  Traffic traffic(const OpSpec& spec) const override;
};

namespace gru {
// The spec's "params" string for a document: the canonical form, with the
// fitted LUTs written out (so the cache key pins every segment).
std::string canonical_params(const nlohmann::json& document);
// The parsed params of a gru_quant spec.
GruParams params_of(const OpSpec& spec);
}  // namespace gru

}  // namespace qjit::codegen
