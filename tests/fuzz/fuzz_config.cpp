// Fuzz target: config JSON (--config, import lines, cache rows) for each op.
// Input: one byte choosing a spec, then the config text. A config either is
// refused with qjit::Error or yields a plan and a source.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::pair<const char*, const char*>> kSpecs = {
      {"fused_ffn", "d=256,h=64"},
      {"fused_ffn", "d=4096,h=11008,m=8,dtype=bf16"},
      {"fused_ffn", "d=4096,h=11008,weights=native,m=2"},
      {"fp_lut", "fn=silu,n=1048576"},
      {"awq_dequant", "k=4096,n=4096"},
      {"wq_gemm", "k=4096,n=11008,m=1"},
      {"wq_gemm", "k=4096,n=11008,m=256"},
      {"wq_gemm", "k=4096,n=11008,m=1024,x=bf16"},
  };
  if (size == 0) return 0;
  const auto& [op, shape] = kSpecs[data[0] % kSpecs.size()];
  static std::vector<qjit::codegen::OpSpec> specs = [] {
    std::vector<qjit::codegen::OpSpec> out;
    for (const auto& [o, s] : kSpecs) out.push_back(qjit::codegen::parse_spec(o, s));
    return out;
  }();
  const auto& spec = specs[data[0] % kSpecs.size()];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const auto config = qjit::parse_json_input(text, "config");
    const auto& def = qjit::codegen::find_op(op);
    def.validate_config(spec, config);
    (void)def.plan(spec, config).describe();
    (void)qjit::codegen::generate_source(spec, config);
  } catch (const qjit::Error&) {
  }
  (void)shape;
  return 0;
}
