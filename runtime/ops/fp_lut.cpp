// fp_lut's typed entry point: argument checks, the spec's fields, then its
// plan (one kernel; the direct table's init kernel runs at load).
#include "qjit/qjit.h"
#include "runtime/ops/run.h"
#include "runtime/spec_key.h"

namespace qjit {

namespace runtime {
CUresult run_fp_lut(const LoadedPlan& plan, const ArgPack& args, CUstream stream) {
  return run_steps(plan, args, stream);
}
}  // namespace runtime

void fp_lut(const FpLutShape& s, const FpLutArgs& args, CUstream_st* stream) {
  if (s.n <= 0) throw Error("argument", "fp_lut: n=" + std::to_string(s.n) + " (must be positive)");
  if (s.in == DType::mixed || s.out == DType::mixed)
    throw Error("argument", "fp_lut: in/out must be fp16, bf16 or fp32, not mixed");
  const ArgPack pack = args.pack();
  const auto describe = [&](runtime::SpecFields& f) {
    f.add("fn", s.fn).add("n", s.n).add("in", to_string(s.in)).add("out", to_string(s.out)).add("cuts", s.cuts);
  };
  runtime::call("fp_lut", describe, pack, runtime::run_fp_lut, stream);
}

}  // namespace qjit
