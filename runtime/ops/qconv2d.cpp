// qconv2d's typed entry point: argument checks, the spec's fields, then its
// plan (one kernel: the direct or the implicit-GEMM family).
#include "qjit/qjit.h"
#include "runtime/ops/run.h"
#include "runtime/spec_key.h"

namespace qjit {

namespace runtime {
CUresult run_qconv2d(const LoadedPlan& plan, const ArgPack& args, CUstream stream) {
  return run_steps(plan, args, stream);
}
}  // namespace runtime

void qconv2d(const QConv2dShape& s, const QConv2dArgs& args, CUstream_st* stream) {
  if (s.x != DType::fp16 && s.x != DType::fp32)
    throw Error("argument", std::string("qconv2d: x ") + to_string(s.x) + " (expected fp16 or fp32)");
  if (s.bias != (args.bias != nullptr))
    throw Error("argument", std::string("qconv2d: bias is ") + (args.bias ? "given" : "null") +
                                " but the shape says bias=" + (s.bias ? "true" : "false"));
  const ArgPack pack = args.pack();
  const auto describe = [&](runtime::SpecFields& f) {
    f.add("n", s.n).add("ci", s.ci).add("h", s.h).add("w", s.w).add("co", s.co).add("kh", s.kh).add("kw", s.kw);
    f.add("stride_h", s.stride_h).add("stride_w", s.stride_w).add("pad_h", s.pad_h).add("pad_w", s.pad_w);
    f.add("dil_h", s.dil_h).add("dil_w", s.dil_w).add("layout", s.layout).add("bits", s.bits).add("block", s.block);
    f.add("x", to_string(s.x)).add("bias", s.bias ? "yes" : "no").add("act", s.act);
  };
  runtime::call("qconv2d", describe, pack, runtime::run_qconv2d, stream);
}

}  // namespace qjit
