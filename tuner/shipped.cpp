#include "tuner/shipped.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <ostream>
#include "codegen/error.h"
#include "runtime/kernel_cache.h"

namespace qjit::tuner {

namespace fs = std::filesystem;

namespace {

// The manifest of shapes sits in the same folder; it is not a record file.
constexpr const char* kModelsFile = "models.jsonl";

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

}  // namespace

std::string shipped_dir() {
  if (const char* env = std::getenv("QJIT_SHIPPED")) return is_dir(env) ? std::string(env) : std::string();
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // <prefix>/bin/qjit or <prefix>/lib/... -> <prefix>/share/qjit/tuned
    const fs::path installed = self.parent_path().parent_path() / "share" / "qjit" / "tuned";
    if (is_dir(installed)) return installed.string();
  }
#ifdef QJIT_SOURCE_TUNED_DIR
  if (is_dir(QJIT_SOURCE_TUNED_DIR)) return QJIT_SOURCE_TUNED_DIR;
#endif
  return "";
}

ShippedSet read_shipped(const std::string& dir) {
  ShippedSet set;
  if (dir.empty()) return set;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".jsonl" && e.path().filename() != kModelsFile) files.push_back(e.path());
  if (ec) {
    set.problems.push_back(dir + ": " + ec.message());
    return set;
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::ifstream in(path);
    int number = 0;
    for (std::string text; std::getline(in, text);) {
      ++number;
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = path.filename().string() + ":" + std::to_string(number);
      try {
        ShippedRecord r{where, cache::parse_record_line(text), {}, {}};
        if (!r.line.record.contains("fingerprint")) throw Error("import", "the record has no fingerprint");
        const auto fp = cache::Fingerprint::from_json(r.line.record["fingerprint"]);
        r.device = fp.device;
        r.templates_hash = fp.templates_hash;
        set.records.push_back(std::move(r));
      } catch (const std::exception& e) {
        set.problems.push_back(where + ": " + e.what());
      }
    }
  }
  return set;
}

std::vector<std::string> stale_records(const ShippedSet& set) {
  std::vector<std::string> out;
  for (const auto& r : set.records)
    if (r.templates_hash != runtime::templates_hash(r.line.spec.op))
      out.push_back(r.where + ": " + r.line.spec.op + "'s templates changed since it was tuned");
  return out;
}

std::vector<ShippedRecord> shipped_for(const ShippedSet& set, const cache::DeviceIdentity& device) {
  std::vector<ShippedRecord> out;
  for (const auto& r : set.records)
    if (r.device.name == device.name && r.device.compute_capability == device.compute_capability) out.push_back(r);
  return out;
}

std::vector<nlohmann::json> shipped_configs(const codegen::OpSpec& spec, const cache::DeviceIdentity& device,
                                            std::ostream* warn) {
  static std::once_flag once;
  static ShippedSet set;
  std::call_once(once, [&] {
    set = read_shipped(shipped_dir());
    if (warn) {
      for (const auto& p : set.problems) *warn << "qjit: shipped tuning record skipped: " << p << "\n";
      for (const auto& p : stale_records(set))
        *warn << "qjit: shipped tuning record from older templates (verified and timed here all the same): " << p
              << "\n";
    }
  });
  std::vector<nlohmann::json> out;
  const std::string key = spec.canonical_json();
  for (const auto& r : shipped_for(set, device))
    if (r.line.spec.canonical_json() == key) out.push_back(r.line.config);
  return out;
}

}  // namespace qjit::tuner
