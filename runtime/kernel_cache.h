// From spec to a launchable function: in-memory map → SQLite store → JIT.
//
//   get(spec): 1. the in-memory map of the caller's current context (hot
//                 path: no SQLite, no hashing of JSON)
//              2. the store, by fingerprint key (checksum verified on load)
//              3. miss: the op's heuristic default config, compiled with NVRTC
//                 for this GPU and stored marked untuned.
// Each context (each device, or a context of the caller's own) loads its own
// modules. QJIT_LOG=1 reports on stderr every plan loaded (tuned, untuned or
// compiled on a miss); QJIT_REQUIRE_TUNED=1 makes an untuned plan an error
// (qjit::Error stage "untuned") before anything is compiled or stored.
#pragma once
#include <cuda.h>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <nlohmann/json.hpp>
#include "cache/store.h"
#include "codegen/nvrtc.h"
#include "codegen/op.h"
#include "codegen/spec.h"
#include "runtime/device.h"
#include "runtime/plan.h"

namespace qjit::runtime {

// Everything of the cache key except the spec, for this process's GPU and toolchain.
cache::Fingerprint fingerprint(const codegen::OpSpec& spec);
// SHA-256 over the templates and common headers the op includes: an edit to
// one op's templates leaves the other ops' rows valid.
std::string templates_hash(const std::string& op);

// cache::build_record for this GPU (the runtime's miss path, tests).
cache::KernelRecord build_record(const codegen::OpSpec& spec, const nlohmann::json& config, bool tuned);

// Loads a record's cubin and resolves its config's plan. Throws
// qjit::Error("driver", ...) on failure.
LoadedPlan load_record(const cache::KernelRecord& rec, const codegen::OpSpec& spec);

class KernelCache {
 public:
  // The process-wide cache on Store::default_path() (or set_path()).
  static KernelCache& instance();
  void set_path(const std::string& path);  // drops what is loaded
  std::string path();

  // fast_key: a cheap string unique per spec, built by the typed entry point
  // without JSON (runtime/spec_key.h); make_spec runs only on the first call
  // per fast_key. With `check`, a plan not loaded yet has the call's
  // pointers checked against the config it would load before anything is
  // compiled or stored: bad input leaves the cache as it was (run_checked
  // checks them again on every call).
  template <typename MakeSpec>
  const LoadedPlan& get(std::string_view fast_key, MakeSpec&& make_spec, const ArgPack* check = nullptr) {
    const CUcontext context = current_context();  // nullptr without a GPU: the spec's checks speak first
    return get(context ? context_id(context) : 0, fast_key, make_spec, check);
  }
  // The same for context `context`, the caller's current one (the typed
  // entry points know it already: runtime::call's CallerContext).
  template <typename MakeSpec>
  const LoadedPlan& get(ContextId context, std::string_view fast_key, MakeSpec&& make_spec,
                        const ArgPack* check = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto c = loaded_.find(context); c != loaded_.end())
        if (auto it = c->second.find(fast_key); it != c->second.end()) return *it->second;
    }
    return get_slow(context, std::string(fast_key), make_spec(), check);
  }

 private:
  const LoadedPlan& get_slow(ContextId context, const std::string& fast_key, const codegen::OpSpec& spec,
                             const ArgPack* check);
  cache::Store& store();

  std::mutex mu_;
  std::string path_;
  std::unique_ptr<cache::Store> store_;
  // Looked up by string_view, without building a std::string per call.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Plans = std::unordered_map<std::string, std::unique_ptr<LoadedPlan>, KeyHash, std::equal_to<>>;
  // Per context: its own modules. A destroyed context's plans stay (their
  // handles dead, never used again: no later context has its id).
  std::unordered_map<ContextId, Plans> loaded_;
};

}  // namespace qjit::runtime
