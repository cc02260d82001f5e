// gru_quant's typed entry point: the shape's fields (the params document in
// canonical form), then its plan (the input projection, then T steps).
#include <map>
#include <mutex>

#include "cache/sha256.h"
#include "codegen/json_input.h"
#include "codegen/ops/gru_quant.h"
#include "qjit/qjit.h"
#include "runtime/ops/run.h"
#include "runtime/spec_key.h"

namespace qjit {

namespace runtime {
CUresult run_gru_quant(const LoadedPlan& plan, const ArgPack& args, CUstream stream) {
  return run_steps(plan, args, stream);
}
}  // namespace runtime

namespace {
struct Canonical {
  std::string text, digest;  // the canonical document and its SHA-256 (the fast key's stand-in)
};
// Canonical params per document text: parsing and fitting LUTs once per
// distinct document, not per call.
const Canonical& canonical(const std::string& text) {
  static std::mutex mu;
  static std::map<std::string, Canonical> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(text);
  if (it == known.end()) {
    std::string c = codegen::gru::canonical_params(parse_json_input(text, "gru_quant params"));
    std::string digest = cache::sha256_hex(c);
    it = known.emplace(text, Canonical{std::move(c), std::move(digest)}).first;
  }
  return it->second;
}
}  // namespace

void gru_quant(const GruQuantShape& s, const GruQuantArgs& args, CUstream_st* stream) {
  const ArgPack pack = args.pack();
  const Canonical& params = canonical(s.params);
  const auto describe = [&](runtime::SpecFields& f) {
    f.add("t", s.t).add("n", s.n).add("c", s.c).add("h", s.h).add_long("params", params.text, params.digest);
  };
  runtime::call("gru_quant", describe, pack, runtime::run_gru_quant, stream);
}

}  // namespace qjit
