// wq_gemm's typed entry point: argument checks, the M bucket, the spec's
// fields, then its plan: one kernel, or the cublas family's dequantisation,
// cuBLAS GEMM and epilogue (codegen/ops/wq_dense.h).
#include "codegen/ops/wq_gemm.h"
#include "qjit/qjit.h"
#include "runtime/ops/run.h"
#include "runtime/spec_key.h"

namespace qjit {

namespace runtime {
CUresult run_wq_gemm(const LoadedPlan& plan, const ArgPack& args, CUstream stream) {
  return run_steps(plan, args, stream);
}
}  // namespace runtime

void wq_gemm(const WqGemmShape& s, const WqGemmArgs& args, CUstream_st* stream) {
  if (args.m < 0) throw Error("argument", "wq_gemm: m=" + std::to_string(args.m) + " (rows of x must be >= 0)");
  if (args.m == 0) return;
  if (s.scales != DType::fp16 && s.scales != DType::bf16)
    throw Error("argument", std::string("wq_gemm: scales ") + to_string(s.scales) + " (expected fp16 or bf16)");
  if (s.x == DType::mixed) throw Error("argument", "wq_gemm: x mixed (expected fp16, bf16 or fp32)");
  if (s.bias != (args.bias != nullptr))
    throw Error("argument", std::string("wq_gemm: bias is ") + (args.bias ? "given" : "null") +
                                " but the shape says bias=" + (s.bias ? "true" : "false"));
  if (s.residual != (args.residual != nullptr))
    throw Error("argument", std::string("wq_gemm: residual is ") + (args.residual ? "given" : "null") +
                                " but the shape says residual=" + (s.residual ? "true" : "false"));
  const int bucket = codegen::wq_gemm_bucket(args.m);
  const ArgPack pack = args.pack();
  const auto describe = [&](runtime::SpecFields& f) {
    f.add("k", s.k).add("n", s.n).add("m", bucket).add("bits", s.bits).add("g", s.g).add("zero", s.zero);
    f.add("scales", to_string(s.scales)).add("x", to_string(s.x)).add("bias", s.bias ? "yes" : "no");
    f.add("act", s.act).add("residual", s.residual ? "yes" : "no");
  };
  runtime::call("wq_gemm", describe, pack, runtime::run_wq_gemm, stream);
}

}  // namespace qjit
