#include "tuner/workload.h"
#include "codegen/error.h"

namespace qjit::tuner {

// One line per op (defined in tuner/reference/<op>.cpp).
std::unique_ptr<Workload> make_fused_ffn_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes);
std::unique_ptr<Workload> make_fp_lut_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes);
std::unique_ptr<Workload> make_awq_dequant_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes);

std::unique_ptr<Workload> make_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  if (spec.op == "fused_ffn") return make_fused_ffn_workload(spec, seed, l2_bytes);
  if (spec.op == "fp_lut") return make_fp_lut_workload(spec, seed, l2_bytes);
  if (spec.op == "awq_dequant") return make_awq_dequant_workload(spec, seed, l2_bytes);
  if (spec.op == "wq_gemm") return make_wq_gemm_workload(spec, seed, l2_bytes, 0);
  throw Error("tuner", "no tuning workload for op '" + spec.op + "'");
}

}  // namespace qjit::tuner
