#include "runtime/kernel_cache.h"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include "cache/record.h"
#include "cache/sha256.h"
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/templates.h"
#include "runtime/device.h"
#include "runtime/driver.h"

namespace qjit::runtime {

// The op's templates (templates/<op>/), the op headers they include from
// other folders (e.g. fused_ffn's wq kernels from templates/wq_gemm/), and
// the common headers every generated source includes.
std::string templates_hash(const std::string& op) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::string> hashes;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = hashes.find(op); it != hashes.end()) return it->second;
  const auto files = codegen::all_templates();
  std::vector<std::string> wanted;
  const auto want = [&](const std::string& path) {
    if (std::find(wanted.begin(), wanted.end(), path) == wanted.end()) wanted.push_back(path);
  };
  for (const auto& f : files)
    if (f.path.rfind("templates/" + op + "/", 0) == 0 || f.path.rfind("templates/common/", 0) == 0) want(f.path);
  for (size_t i = 0; i < wanted.size(); ++i)  // grows as included headers are found
    for (const auto& f : files) {
      if (f.path != wanted[i]) continue;
      for (size_t at = f.text.find("#include \"qjit/"); at != std::string::npos;
           at = f.text.find("#include \"qjit/", at + 1)) {
        const size_t open = at + 15, close = f.text.find('"', open);
        const std::string name = f.text.substr(open, close - open);
        if (name.find('/') != std::string::npos) want("templates/" + name);
      }
    }
  std::sort(wanted.begin(), wanted.end());
  std::string all;
  for (const auto& path : wanted)
    for (const auto& f : files)
      if (f.path == path) all += f.path + '\0' + f.text + '\0';
  return hashes[op] = cache::sha256_hex(all);
}

cache::Fingerprint fingerprint(const codegen::OpSpec& spec) {
  cache::Fingerprint fp;
  fp.op = spec.op;
  fp.spec_json = spec.canonical_json();
  fp.device = current_device().identity;
  fp.nvrtc_version = codegen::nvrtc_version();
  fp.templates_hash = templates_hash(spec.op);
  fp.qjit_version = QJIT_VERSION;
  fp.codegen_version = codegen::kCodegenVersion;
  return fp;
}

cache::KernelRecord build_record(const codegen::OpSpec& spec, const nlohmann::json& config, bool tuned) {
  return cache::build_record(fingerprint(spec), spec, config, current_device().arch, tuned);
}

LoadedPlan load_record(const cache::KernelRecord& rec, const codegen::OpSpec& spec) {
  current_device();
  LoadedPlan p = load_plan(spec.op, codegen::find_op(spec.op).plan(spec, rec.config), rec.cubin);
  p.key = rec.key();
  p.config = rec.config;
  p.tuned = rec.tuned;
  return p;
}

KernelCache& KernelCache::instance() {
  static KernelCache cache;
  return cache;
}

void KernelCache::set_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  path_ = path;
  store_.reset();
  loaded_.clear();  // modules stay loaded until exit; references handed out stay valid
}

std::string KernelCache::path() {
  std::lock_guard<std::mutex> lock(mu_);
  return path_.empty() ? cache::Store::default_path() : path_;
}

cache::Store& KernelCache::store() {
  if (!store_) store_ = std::make_unique<cache::Store>(path_.empty() ? cache::Store::default_path() : path_);
  return *store_;
}

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

std::string tune_command(const codegen::OpSpec& spec) {
  return "qjit tune --op " + spec.op + " --shape '" + spec.shape_string() + "'";
}

}  // namespace

const LoadedPlan& KernelCache::get_slow(ContextId context, const std::string& fast_key, const codegen::OpSpec& spec,
                                        const ArgPack* check) {
  std::lock_guard<std::mutex> lock(mu_);
  Plans& plans = loaded_[context];
  if (auto it = plans.find(fast_key); it != plans.end()) return *it->second;
  const auto& op = codegen::find_op(spec.op);
  const bool log = env_flag("QJIT_LOG");
  const std::string& device = current_device().identity.name;
  const auto check_for = [&](const nlohmann::json& config) {
    if (check) check_pointers(op.args(), op.plan(spec, config), *check);
  };
  const std::string key = fingerprint(spec).key();
  std::optional<cache::KernelRecord> rec = store().lookup(key);
  std::unique_ptr<LoadedPlan> k;
  if (rec) {
    check_for(rec->config);
    try {
      k = std::make_unique<LoadedPlan>(load_record(*rec, spec));
    } catch (const Error& e) {
      // A row that passes its checksum but does not load is a miss: rebuild it.
      std::fprintf(stderr, "qjit: cached kernel %s does not load (%s); recompiling\n", key.substr(0, 12).c_str(),
                   e.what());
      if (!store().read_only()) store().remove(key);
      rec.reset();
    }
  }
  if (env_flag("QJIT_REQUIRE_TUNED") && (!rec || !rec->tuned))
    throw Error("untuned", spec.label() + (rec ? " has only an untuned kernel" : " has no kernel") + " for " + device +
                               " in " + store().path() + ", and QJIT_REQUIRE_TUNED is set; tune it: " +
                               tune_command(spec));
  if (log && rec)
    std::fprintf(stderr, "qjit: %s: loaded the %s kernel %s on %s%s\n", spec.label().c_str(),
                 rec->tuned ? "tuned" : "untuned (default config)", key.substr(0, 12).c_str(), device.c_str(),
                 rec->tuned ? "" : ("; tune it: " + tune_command(spec)).c_str());
  if (!rec) {
    if (log)
      std::fprintf(stderr, "qjit: %s: not in %s for %s: compiling the default config, untuned; tune it: %s\n",
                   spec.label().c_str(), store().path().c_str(), device.c_str(), tune_command(spec).c_str());
    const nlohmann::json config = op.default_config(spec);
    check_for(config);
    cache::KernelRecord fresh = build_record(spec, config, /*tuned=*/false);
    if (!store().read_only()) store().put(fresh);  // (read-only: kept in this process only)
    k = std::make_unique<LoadedPlan>(load_record(fresh, spec));
    rec = std::move(fresh);
  }
  cache::dump_if_requested(*rec);
  return *(plans[fast_key] = std::move(k));
}

}  // namespace qjit::runtime
