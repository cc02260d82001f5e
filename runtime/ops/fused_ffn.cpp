// fused_ffn's typed entry points (dense and quantized W1/W3): argument
// checks, the spec's fields, then its plan (one kernel). The checks run
// before anything is launched or cached.
#include "qjit/qjit.h"
#include "runtime/ops/run.h"
#include "runtime/spec_key.h"

namespace qjit {

const char* to_string(DType t) {
  switch (t) {
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::fp32: return "fp32";
    case DType::mixed: return "mixed";
  }
  return "?";
}

const char* to_string(Activation a) {
  switch (a) {
    case Activation::silu: return "silu";
    case Activation::silu_lut: return "silu_lut";
    case Activation::silu_lut_seed: return "silu_lut_seed";
  }
  return "?";
}

namespace runtime {
CUresult run_fused_ffn(const LoadedPlan& plan, const ArgPack& args, CUstream stream) {
  return run_steps(plan, args, stream);
}
}  // namespace runtime

namespace {

void check_rows(int d, int h, int m) {
  if (d <= 0 || h <= 0)
    throw Error("argument", "fused_ffn: d=" + std::to_string(d) + ", h=" + std::to_string(h) + " (both must be positive)");
  if (m < 1 || m > 8) throw Error("argument", "fused_ffn: m=" + std::to_string(m) + " (expected 1..8)");
}

}  // namespace

void fused_ffn(const FusedFfnShape& s, const FusedFfnArgs& args, CUstream_st* stream) {
  check_rows(s.d, s.h, s.m);
  const ArgPack pack = args.pack();
  const auto describe = [&](runtime::SpecFields& f) {
    f.add("d", s.d).add("h", s.h).add("m", s.m).add("dtype", to_string(s.dtype)).add("act", to_string(s.act));
  };
  runtime::call("fused_ffn", describe, pack, runtime::run_fused_ffn, stream);
}

void fused_ffn(const QuantFfnShape& s, const FusedFfnArgs& args, CUstream_st* stream) {
  check_rows(s.d, s.h, s.m);
  if (s.scales != DType::fp16 && s.scales != DType::bf16)
    throw Error("argument", std::string("fused_ffn: scales ") + to_string(s.scales) + " (expected fp16 or bf16)");
  if (s.x == DType::mixed) throw Error("argument", "fused_ffn: x mixed (expected fp16, bf16 or fp32)");
  const ArgPack pack = args.pack();
  const auto describe = [&](runtime::SpecFields& f) {
    f.add("d", s.d).add("h", s.h).add("m", s.m).add("dtype", to_string(s.x)).add("act", to_string(s.act));
    f.add("weights", "native").add("bits", s.bits).add("g", s.g).add("zero", s.zero);
    f.add("scales", to_string(s.scales));
  };
  runtime::call("fused_ffn", describe, pack, runtime::run_fused_ffn, stream);
}

void set_cache_path(const std::string& path) { runtime::KernelCache::instance().set_path(path); }
Preload::Preload() { runtime::begin_preload(); }
Preload::~Preload() { runtime::end_preload(); }

}  // namespace qjit
