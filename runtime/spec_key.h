// The two encodings of a typed entry point's spec, from one list of fields:
// the fast key of the hot path (a string built in place, no JSON, no
// allocation) and the JSON parameters make_spec validates on the first call.
// Each runtime/ops/<op>.cpp writes its fields once, for both.
#pragma once
#include <charconv>
#include <string>
#include <string_view>
#include <nlohmann/json.hpp>
#include "codegen/error.h"
#include "codegen/spec.h"
#include "runtime/device.h"
#include "runtime/kernel_cache.h"

namespace qjit::runtime {

class SpecFields {
 public:
  enum class Mode { fast_key, json };
  SpecFields(Mode mode, std::string_view op) : mode_(mode) { append(op); }

  SpecFields& add(std::string_view key, long long value) {
    if (mode_ == Mode::json) {
      params_[std::string(key)] = value;
      return *this;
    }
    append("|"), append(key), append("=");
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    return append({digits, static_cast<size_t>(end - digits)});
  }
  SpecFields& add(std::string_view key, std::string_view value) {
    if (mode_ == Mode::json) {
      params_[std::string(key)] = std::string(value);
      return *this;
    }
    append("|"), append(key), append("=");
    return append(value);
  }

  // A long value (gru_quant's params document): the JSON spec gets it whole,
  // the fast key its digest (the caller's SHA-256 of the same text).
  SpecFields& add_long(std::string_view key, std::string_view value, std::string_view digest) {
    return add(key, mode_ == Mode::json ? value : digest);
  }

  std::string_view fast_key() const { return {buf_, len_}; }
  const nlohmann::json& params() const { return params_; }

 private:
  SpecFields& append(std::string_view s) {
    if (len_ + s.size() > sizeof buf_)
      throw Error("argument", "spec too long for the fast key: " + std::string(buf_, len_) + std::string(s));
    for (char c : s) buf_[len_++] = c;
    return *this;
  }

  Mode mode_;
  char buf_[512];
  size_t len_ = 0;
  nlohmann::json params_;
};

// The plan for the spec of `describe`'s fields, through the process's kernel
// cache: the typed entry points' lookup. describe(SpecFields&) writes the
// op's fields; only the first call per fast key builds the JSON spec (and
// checks `args` against the plan before compiling or storing anything).
// In `context` (the caller's current one), or the current one looked up.
template <typename Describe>
const LoadedPlan& plan_for(const char* op, const Describe& describe, const ArgPack& args, ContextId context) {
  SpecFields fast(SpecFields::Mode::fast_key, op);
  describe(fast);
  const auto make_spec = [&] {
    SpecFields json(SpecFields::Mode::json, op);
    describe(json);
    return codegen::make_spec(op, json.params());
  };
  return KernelCache::instance().get(context, fast.fast_key(), make_spec, &args);
}
template <typename Describe>
const LoadedPlan& plan_for(const char* op, const Describe& describe, const ArgPack& args) {
  const CUcontext context = current_context();  // nullptr without a GPU: the spec's checks speak first
  return plan_for(op, describe, args, context ? context_id(context) : 0);
}

// One call of a typed entry point: in the caller's context (CallerContext:
// none current → the default device's primary context for the call only),
// the plan of `describe`'s spec, then `run` on the caller's stream after the
// pointer checks (or, under qjit::Preload, the plan and the stream's
// workspace made ready and nothing launched).
template <typename Describe>
void call(const char* op, const Describe& describe, const ArgPack& args, RunPlan run, CUstream_st* stream) {
  const CallerContext context;  // one cuCtxGetCurrent and cuCtxGetId a call, shared with the plan's lookup
  const LoadedPlan& plan = plan_for(op, describe, args, context.id());
  run_checked(run, plan, args, reinterpret_cast<CUstream>(stream));
}

}  // namespace qjit::runtime
