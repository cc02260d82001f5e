// qjit export / qjit import: tuning results as JSON lines, so a team can share
// them (and qjit ships some: import --shipped). A record carries spec, config,
// device and timings (no cubin): on import it is recompiled and re-verified on
// this machine before it is ever used.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include "cache/record.h"
#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/registry.h"
#include "runtime/device.h"
#include "runtime/kernel_cache.h"
#include "tuner/shipped.h"
#include "tuner/tuner.h"

namespace qjit::cli {

void add_export(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("export", "write cached tuning results as JSON lines");
  cmd->footer(kExitCodesHelp);
  struct Opts {
    CacheOption cache;
    std::string out, op;
  };
  auto o = std::make_shared<Opts>();
  o->cache.add_to(cmd);
  cmd->add_option("-o,--out", o->out, "file to write (default: stdout)");
  cmd->add_option("--op", o->op, "only this op");
  cmd->callback([o, &rc] {
    cache::Store store(o->cache.resolved());
    std::ofstream file;
    if (!o->out.empty()) {
      file.open(o->out + ".tmp");
      if (!file) throw Error("argument", "cannot write --out " + o->out);
    }
    std::ostream& os = o->out.empty() ? std::cout : file;
    int n = 0;
    for (auto& r : store.list(false)) {
      if (!o->op.empty() && r.fp.op != o->op) continue;
      nlohmann::json j = {{"format", cache::kRecordFormat},          {"fingerprint", r.fp.to_json()},
                          {"spec", nlohmann::json::parse(r.fp.spec_json)},
                          {"config", r.config},         {"tuned", r.tuned},
                          {"median_us", r.median_us},   {"gbps", r.gbps},
                          {"pct_copy_bw", r.pct_copy_bw}, {"verify_error", r.verify_error},
                          {"created", r.created}};
      os << j.dump() << "\n";
      ++n;
    }
    if (!o->out.empty()) {
      file.close();
      std::filesystem::rename(o->out + ".tmp", o->out);  // a reader never sees half a file
    }
    std::cerr << "exported " << n << " record(s)\n";
    rc = kOk;
  });
}

namespace {

struct ImportItem {
  codegen::OpSpec spec;
  cache::ImportRecord rec;
  std::string where;  // "file:line"
};

// Re-verifies each item on this GPU: compiled, verified against the CPU
// reference and timed as a tune limited to its config; the tune keeps the
// faster of it and what the cache held. One that fails is reported and the
// rest go on. Returns kOk, or kFailed when any failed.
int verify_imports(std::vector<ImportItem>& items, cache::Store& store, bool json) {
  nlohmann::json out = nlohmann::json::array();
  int failed = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    auto& it = items[i];
    std::cerr << fmt("[%zu/%zu] %s\n", i + 1, items.size(), it.spec.label().c_str());
    nlohmann::json row = {{"spec", nlohmann::json::parse(it.rec.spec_json)}, {"config", it.rec.config},
                          {"from", it.where}};
    try {
      tuner::TuneOptions t;
      t.only_configs = {it.rec.config};
      t.baselines = false;
      t.progress = &std::cerr;
      auto rep = tuner::tune(it.spec, store, t);
      row["status"] = "verified";
      row["best_us"] = rep.best.median_us;
      row["best_config"] = rep.best.config;
      if (!json)
        std::cout << fmt("%s: imported config %s re-verified; best now %.2f us %s\n", it.spec.label().c_str(),
                         it.rec.config.dump().c_str(), rep.best.median_us, rep.best.config.dump().c_str());
    } catch (const std::exception& e) {
      ++failed;
      row["status"] = "failed";
      row["error"] = e.what();
      if (!json) std::cout << fmt("%s: imported config %s failed: %s\n", it.spec.label().c_str(),
                                  it.rec.config.dump().c_str(), e.what());
    }
    store.remove_import(it.rec.id);
    out.push_back(std::move(row));
  }
  if (json) std::cout << out.dump(2) << "\n";
  return failed ? kFailed : kOk;
}

// The shipped records made on this GPU whose spec the cache has no tuned
// kernel for yet (tuner/shipped.h).
std::vector<ImportItem> shipped_items(cache::Store& store) {
  const std::string dir = tuner::shipped_dir();
  const auto set = tuner::read_shipped(dir);
  for (const auto& p : set.problems) std::cerr << "qjit: shipped tuning record skipped: " << p << "\n";
  const auto& device = runtime::current_device().identity;
  const auto mine = tuner::shipped_for(set, device);
  std::map<std::string, int> others;
  for (const auto& r : set.records)
    if (r.device.name != device.name) ++others[r.device.name];
  if (mine.empty()) {
    std::string have;
    for (const auto& [name, n] : others) have += fmt("%s%s (%d)", have.empty() ? "" : ", ", name.c_str(), n);
    std::cerr << "no shipped tuning for " << device.name << " (compute capability " << device.compute_capability
              << ") in "
              << (dir.empty() ? std::string("(no shipped folder found; set QJIT_SHIPPED)") : dir)
              << (have.empty() ? std::string() : "; records exist for: " + have) << "\n";
  }
  std::vector<ImportItem> items;
  int tuned = 0;
  for (const auto& r : mine) {
    const auto known = store.lookup(runtime::fingerprint(r.line.spec).key());
    if (known && known->tuned) {
      ++tuned;
      continue;
    }
    items.push_back({r.line.spec, {0, r.line.spec.op, r.line.spec.canonical_json(), r.line.config, r.line.record},
                     r.where});
  }
  std::cerr << fmt("%zu shipped record(s) for %s in %s; %d already tuned here, %zu to verify\n", mine.size(),
                   device.name.c_str(), dir.c_str(), tuned, items.size());
  return items;
}

}  // namespace

void add_import(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("import", "bring in JSON-lines records; re-verify them on this GPU");
  cmd->footer(std::string("Every line is checked first; one bad line imports nothing.\n"
                          "With a GPU, imported configs are compiled, verified and timed now;\n"
                          "without one they wait, and the next `qjit tune` of their spec tries them first.\n"
                          "--shipped imports the records that come with qjit for this GPU (share/qjit/tuned,\n"
                          "or $QJIT_SHIPPED), skipping specs already tuned here.\n") +
              kExitCodesHelp);
  struct Opts {
    CacheOption cache;
    std::string file;
    bool no_verify = false, shipped = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  o->cache.add_to(cmd);
  auto* file = cmd->add_option("file", o->file, "JSON-lines file from qjit export ('-' for stdin)");
  auto* shipped = cmd->add_flag("--shipped", o->shipped, "the tuning records shipped with qjit for this GPU");
  file->excludes(shipped);
  cmd->add_flag("--no-verify", o->no_verify, "only store them; verify at the next qjit tune")->excludes(shipped);
  cmd->add_flag("--json", o->json, "print one JSON result per record on stdout");
  cmd->callback([o, &rc] {
    if (o->file.empty() && !o->shipped) throw Error("argument", "import needs a FILE (or --shipped)");
    std::string why;
    if (o->shipped) {
      // The records to take depend on the GPU's name.
      if (!runtime::gpu_available(&why)) {
        const auto set = tuner::read_shipped(tuner::shipped_dir());
        std::cerr << "qjit import --shipped: no usable GPU (" << why << "); " << set.records.size()
                  << " shipped record(s) wait in " << tuner::shipped_dir() << "\n";
        rc = kNoGpu;
        return;
      }
      cache::Store store(o->cache.resolved());
      auto items = shipped_items(store);
      for (auto& it : items) it.rec.id = store.add_import(it.rec);
      rc = verify_imports(items, store, o->json);
      return;
    }
    std::istringstream is(read_input_file("file", o->file));
    std::vector<ImportItem> items;
    std::string line;
    for (int lineno = 1; std::getline(is, line); ++lineno) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = o->file + ":" + std::to_string(lineno);
      try {
        auto r = cache::parse_record_line(line);
        items.push_back({r.spec, {0, r.spec.op, r.spec.canonical_json(), r.config, r.record}, where});
      } catch (const std::exception& e) {
        throw Error("argument", where + ": " + e.what() + "; nothing imported");
      }
    }
    cache::Store store(o->cache.resolved());
    for (auto& it : items) it.rec.id = store.add_import(it.rec);
    std::cerr << "imported " << items.size() << " record(s) into " << store.path() << "\n";
    if (o->no_verify || items.empty()) {
      rc = kOk;
      return;
    }
    if (!runtime::gpu_available(&why)) {
      std::cerr << "no usable GPU (" << why << "): they will be verified by the next qjit tune of their spec\n";
      rc = kOk;
      return;
    }
    rc = verify_imports(items, store, o->json);
  });
}

}  // namespace qjit::cli
