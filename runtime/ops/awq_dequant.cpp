// awq_dequant's typed entry point: argument checks, the spec's fields, then
// its plan (one kernel).
#include "qjit/qjit.h"
#include "runtime/ops/run.h"
#include "runtime/spec_key.h"

namespace qjit {

namespace runtime {
CUresult run_awq_dequant(const LoadedPlan& plan, const ArgPack& args, CUstream stream) {
  return run_steps(plan, args, stream);
}
}  // namespace runtime

void awq_dequant(const AwqDequantShape& s, const AwqDequantArgs& args, CUstream_st* stream) {
  if (s.scales != DType::fp16 && s.scales != DType::bf16)
    throw Error("argument", std::string("awq_dequant: scales ") + to_string(s.scales) + " (expected fp16 or bf16)");
  const ArgPack pack = args.pack();
  const auto describe = [&](runtime::SpecFields& f) {
    f.add("k", s.k).add("n", s.n).add("g", s.g).add("layout", s.layout).add("zero", s.symmetric ? "sym" : "int");
    f.add("scales", to_string(s.scales)).add("out", s.out);
  };
  runtime::call("awq_dequant", describe, pack, runtime::run_awq_dequant, stream);
}

}  // namespace qjit
