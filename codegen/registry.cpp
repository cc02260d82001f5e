#include "codegen/registry.h"
#include "codegen/error.h"
#include "codegen/ops/awq_dequant.h"
#include "codegen/ops/fp_lut.h"
#include "codegen/ops/fused_ffn.h"
#include "codegen/ops/wq_gemm.h"

namespace qjit::codegen {

std::vector<const OpDef*> all_ops() {
  static const FusedFfnOp fused_ffn;
  static const FpLutOp fp_lut;
  static const AwqDequantOp awq_dequant;
  static const WqGemmOp wq_gemm;
  return {&fused_ffn, &fp_lut, &awq_dequant, &wq_gemm};
}

const OpDef& find_op(const std::string& name) {
  std::string known;
  for (const OpDef* op : all_ops()) {
    if (op->name() == name) return *op;
    known += (known.empty() ? "" : ", ") + op->name();
  }
  throw Error("spec", "unknown op '" + name + "'; known ops: " + known);
}

}  // namespace qjit::codegen
