// qjit export / qjit import: tuning results as JSON lines, so a team can share
// them. A record carries spec, config, device and timings (no cubin): on import
// it is recompiled and re-verified on this machine before it is ever used.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include "cache/record.h"
#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/registry.h"
#include "runtime/device.h"
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

void add_import(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("import", "bring in JSON-lines records; re-verify them on this GPU");
  cmd->footer(std::string("Every line is checked first; one bad line imports nothing.\n"
                          "With a GPU, imported configs are compiled, verified and timed now;\n"
                          "without one they wait, and the next `qjit tune` of their spec tries them first.\n") +
              kExitCodesHelp);
  struct Opts {
    CacheOption cache;
    std::string file;
    bool no_verify = false;
  };
  auto o = std::make_shared<Opts>();
  o->cache.add_to(cmd);
  cmd->add_option("file", o->file, "JSON-lines file from qjit export ('-' for stdin)")->required();
  cmd->add_flag("--no-verify", o->no_verify, "only store them; verify at the next qjit tune");
  cmd->callback([o, &rc] {
    std::istringstream is(read_input_file("file", o->file));
    struct Item {
      codegen::OpSpec spec;
      cache::ImportRecord rec;
    };
    std::vector<Item> items;
    std::string line;
    for (int lineno = 1; std::getline(is, line); ++lineno) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        auto r = cache::parse_record_line(line);
        items.push_back({r.spec, {0, r.spec.op, r.spec.canonical_json(), r.config, r.record}});
      } catch (const std::exception& e) {
        throw Error("argument", o->file + ":" + std::to_string(lineno) + ": " + e.what() + "; nothing imported");
      }
    }
    cache::Store store(o->cache.resolved());
    for (auto& it : items) it.rec.id = store.add_import(it.rec);
    std::cerr << "imported " << items.size() << " record(s) into " << store.path() << "\n";
    std::string why;
    if (o->no_verify || items.empty()) {
      rc = kOk;
      return;
    }
    if (!runtime::gpu_available(&why)) {
      std::cerr << "no usable GPU (" << why << "): they will be verified by the next qjit tune of their spec\n";
      rc = kOk;
      return;
    }
    for (auto& it : items) {
      tuner::TuneOptions t;
      t.only_configs = {it.rec.config};
      t.progress = &std::cerr;
      auto rep = tuner::tune(it.spec, store, t);
      std::cout << fmt("%s: imported config %s re-verified; best now %.2f us %s\n", it.spec.label().c_str(),
                       it.rec.config.dump().c_str(), rep.best.median_us, rep.best.config.dump().c_str());
      store.remove_import(it.rec.id);
    }
    rc = kOk;
  });
}

}  // namespace qjit::cli
