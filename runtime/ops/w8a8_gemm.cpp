// w8a8_gemm's typed entry point: argument checks, the M bucket, the spec's
// fields, then its plan (quantize x, block GEMM) once per chunk of the
// bucket's rows: the plan's workspace holds one chunk's codes, so a call of
// more than 4096 rows runs 4096 at a time.
#include <algorithm>

#include "codegen/ops/w8a8_gemm.h"
#include "qjit/qjit.h"
#include "runtime/ops/run.h"
#include "runtime/spec_key.h"

namespace qjit {

namespace runtime {
CUresult run_w8a8_gemm(const LoadedPlan& plan, const ArgPack& args, CUstream stream) {
  return run_steps(plan, args, stream);
}
}  // namespace runtime

void w8a8_gemm(const W8a8GemmShape& s, const W8a8GemmArgs& args, CUstream_st* stream) {
  if (args.m < 0) throw Error("argument", "w8a8_gemm: m=" + std::to_string(args.m) + " (rows of x must be >= 0)");
  if (args.m == 0) return;
  if (s.x == DType::mixed) throw Error("argument", "w8a8_gemm: x mixed (expected fp16, bf16 or fp32)");
  if (s.bias != (args.bias != nullptr))
    throw Error("argument", std::string("w8a8_gemm: bias is ") + (args.bias ? "given" : "null") +
                                " but the shape says bias=" + (s.bias ? "true" : "false"));
  const int bucket = codegen::w8a8_gemm_bucket(args.m);
  const auto describe = [&](runtime::SpecFields& f) {
    f.add("k", s.k).add("n", s.n).add("m", bucket).add("block", s.block).add("x", to_string(s.x));
    f.add("format", s.format);
    if (s.format != "e4m3") f.add("quant_a", s.quant_a).add("quant_w", s.quant_w);  // (e4m3: not applicable)
    f.add("bias", s.bias ? "yes" : "no").add("act", s.act);
  };
  const size_t xb = s.x == DType::fp32 ? 4 : 2;
  for (int first = 0; first < args.m; first += bucket) {
    // A null x or y stays null, for the pointer check to name.
    const auto at_row = [&](auto* p, int width) {
      const size_t bytes = static_cast<size_t>(first) * static_cast<size_t>(width) * xb;
      return p ? reinterpret_cast<decltype(p)>(reinterpret_cast<uintptr_t>(p) + bytes) : p;
    };
    W8a8GemmArgs chunk = args;
    chunk.x = at_row(args.x, s.k);
    chunk.y = at_row(args.y, s.n);
    chunk.m = std::min(bucket, args.m - first);
    const ArgPack pack = chunk.pack();
    runtime::call("w8a8_gemm", describe, pack, runtime::run_w8a8_gemm, stream);
  }
}

}  // namespace qjit
