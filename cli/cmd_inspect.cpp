// qjit source / qjit list / qjit show: read generated code and the cache; no GPU needed.
#include <iostream>
#include <memory>
#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"

namespace qjit::cli {
namespace {

// Records whose key starts with `prefix`, or whose spec is one of `specs`.
std::vector<cache::KernelRecord> find_records(cache::Store& store, const std::string& prefix,
                                              const std::vector<codegen::OpSpec>& specs, bool blobs) {
  std::vector<cache::KernelRecord> out;
  for (auto& r : store.list(blobs)) {
    bool match = !prefix.empty() && r.key().rfind(prefix, 0) == 0;
    for (auto& s : specs) match |= r.fp.spec_json == s.canonical_json();
    if (match) out.push_back(std::move(r));
  }
  return out;
}

std::string spec_label_of(const cache::KernelRecord& r) {
  try {
    return codegen::spec_from_json(nlohmann::json::parse(r.fp.spec_json)).label();
  } catch (const std::exception&) {
    return r.fp.spec_json;
  }
}

}  // namespace

void add_source(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("source", "print the generated CUDA source of a kernel (no GPU needed)");
  cmd->footer(std::string("Examples:\n  qjit source --op fused_ffn --shape d=4096,h=11008\n"
                          "  qjit source --op fused_ffn --shape d=4096,h=11008 --best\n"
                          "  qjit source --op fused_ffn --shape d=4096,h=11008 --config "
                          "'{\"warps\":8,\"rows_per_warp\":2,\"vec_bytes\":16,\"unroll\":2,\"split_d\":1}' --ptx\n") +
              kExitCodesHelp);
  struct Opts {
    SpecOptions spec;
    CacheOption cache;
    std::string config, arch = "sm_90";
    bool best = false, ptx = false, log = false, list_configs = false;
  };
  auto o = std::make_shared<Opts>();
  o->spec.add_to(cmd, true);
  o->cache.add_to(cmd);
  cmd->add_option("--config", o->config, "tunables as JSON (default: the op's heuristic default)");
  cmd->add_flag("--best", o->best, "the source of the best cached kernel for this spec");
  cmd->add_flag("--ptx", o->ptx, "print PTX instead of CUDA (compiled for --arch)");
  cmd->add_flag("--log", o->log, "print the NVRTC/ptxas log (registers, spills) after compiling for --arch");
  cmd->add_flag("--configs", o->list_configs, "list every candidate config of the tunable space instead");
  cmd->add_option("--arch", o->arch, "target for --ptx/--log")->capture_default_str();
  cmd->callback([o, &rc] {
    const auto specs = o->spec.specs();
    if (specs.size() != 1) throw Error("argument", "qjit source takes one spec (one value of m)");
    const auto& spec = specs[0];
    const auto& op = codegen::find_op(spec.op);
    if (o->list_configs) {
      for (auto& c : op.tunable_space(spec)) std::cout << c.dump() << "\n";
      rc = kOk;
      return;
    }
    nlohmann::json config = op.default_config(spec);
    if (o->best) {
      cache::Store store(o->cache.resolved());
      auto recs = find_records(store, "", specs, true);
      if (recs.empty()) {
        std::cerr << "qjit source: nothing cached for " << spec.label() << " in " << store.path()
                  << " (run qjit tune first)\n";
        rc = kNotFound;
        return;
      }
      const auto& r = recs.front();
      std::cerr << "best cached kernel " << r.key().substr(0, 12) << " for " << r.fp.device.name << ": "
                << r.config.dump() << "\n";
      std::cout << (o->ptx ? r.ptx : r.source);
      rc = kOk;
      return;
    }
    if (!o->config.empty()) {
      config = parse_json_input(o->config, "--config");
    }
    auto src = codegen::generate_source(spec, config);
    if (o->ptx || o->log) {
      // A bad --arch is a bad argument (exit 2), not a failed compile.
      if (!codegen::nvrtc_supports_arch(o->arch))
        throw Error("argument", "NVRTC " + codegen::nvrtc_version() + " cannot compile for --arch '" + o->arch +
                                    "' (expected sm_XX, e.g. sm_80 or sm_90)");
      auto res = codegen::compile(src, o->arch);
      if (!res.ok) throw Error("nvrtc", "compile failed", res.log);
      std::cout << (o->ptx ? res.ptx : res.log) << "\n";
    } else {
      std::cout << src.text;
    }
    rc = kOk;
  });
}

void add_list(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("list", "list cached kernels");
  cmd->footer(kExitCodesHelp);
  auto cache_opt = std::make_shared<CacheOption>();
  auto json = std::make_shared<bool>(false);
  cache_opt->add_to(cmd);
  cmd->add_flag("--json", *json, "JSON output");
  cmd->callback([cache_opt, json, &rc] {
    cache::Store store(cache_opt->resolved());
    auto recs = store.list(false);
    if (*json) {
      nlohmann::json a = nlohmann::json::array();
      for (auto& r : recs)
        a.push_back({{"key", r.key()}, {"op", r.fp.op}, {"spec", nlohmann::json::parse(r.fp.spec_json)},
                     {"device", r.fp.device.name}, {"tuned", r.tuned}, {"config", r.config},
                     {"median_us", r.median_us}, {"pct_copy_bw", r.pct_copy_bw}, {"created", r.created},
                     {"last_used", r.last_used}});
      std::cout << a.dump(2) << "\n";
    } else {
      std::cout << fmt("%-12s  %-44s %-22s %-7s %10s %7s  %s\n", "key", "spec", "device", "tuned", "us", "%copy",
                       "created");
      for (auto& r : recs)
        std::cout << fmt("%-12s  %-44s %-22.22s %-7s %10.2f %6.1f%%  %s\n", r.key().substr(0, 12).c_str(),
                         spec_label_of(r).c_str(), r.fp.device.name.c_str(), r.tuned ? "yes" : "no", r.median_us,
                         r.pct_copy_bw, r.created.c_str());
      std::cout << recs.size() << " kernel(s) in " << store.path() << "\n";
    }
    rc = kOk;
  });
}

void add_show(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("show", "config, timings, resources and the trial leaderboard of cached kernels");
  cmd->footer(std::string("Select by key prefix (from qjit list) or by --op/--shape.\n") + kExitCodesHelp);
  struct Opts {
    SpecOptions spec;
    CacheOption cache;
    std::string key;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("key", o->key, "key prefix");
  o->spec.add_to(cmd, false);
  o->cache.add_to(cmd);
  cmd->add_flag("--json", o->json, "JSON output");
  cmd->callback([o, &rc] {
    std::vector<codegen::OpSpec> specs;
    if (!o->spec.shape.empty()) specs = o->spec.specs();
    if (o->key.empty() && specs.empty()) throw Error("argument", "qjit show needs a key prefix or --shape");
    cache::Store store(o->cache.resolved());
    auto recs = find_records(store, o->key, specs, false);
    if (recs.empty()) {
      std::cerr << "qjit show: nothing cached matches in " << store.path() << "\n";
      rc = kNotFound;
      return;
    }
    nlohmann::json a = nlohmann::json::array();
    for (auto& r : recs) {
      auto trials = store.trials(r.key());
      if (o->json) {
        nlohmann::json t = nlohmann::json::array();
        for (auto& x : trials)
          t.push_back({{"config", x.config}, {"status", cache::to_string(x.status)}, {"screened", x.screened},
                       {"median_us", x.median_us},
                       {"gbps", x.gbps},
                       {"verify_error", x.verify_error >= 0 ? nlohmann::json(x.verify_error) : nlohmann::json(nullptr)},
                       {"registers", x.registers},
                       {"spill_bytes", x.spill_bytes}, {"compile_ms", x.compile_ms}, {"message", x.message}});
        a.push_back({{"key", r.key()}, {"fingerprint", r.fp.to_json()}, {"config", r.config}, {"tuned", r.tuned},
                     {"median_us", r.median_us}, {"gbps", r.gbps}, {"pct_copy_bw", r.pct_copy_bw},
                     {"verify_error", r.verify_error}, {"registers", r.registers}, {"spill_bytes", r.spill_bytes},
                     {"shared_bytes", r.shared_bytes}, {"created", r.created}, {"last_used", r.last_used},
                     {"trials", t}});
        continue;
      }
      std::cout << "key      " << r.key() << "\nspec     " << spec_label_of(r) << "\ndevice   " << r.fp.device.name
                << " (cc " << r.fp.device.compute_capability << ", " << r.fp.device.sm_count << " SMs, driver "
                << r.fp.device.driver_version << "), NVRTC " << r.fp.nvrtc_version << "\nconfig   " << r.config.dump()
                << (r.tuned ? "  (tuned)" : "  (untuned default)") << "\n"
                << fmt("timing   %.2f us, %.0f GB/s, %.1f%% of copy bandwidth, verify error %.2e\n", r.median_us,
                       r.gbps, r.pct_copy_bw, r.verify_error)
                << fmt("resource %d registers, %d bytes spilled, %d bytes shared\n", r.registers, r.spill_bytes,
                       r.shared_bytes)
                << "created  " << r.created << ", last used " << r.last_used << "\n"
                << "trials (" << trials.size() << "):\n";
      int rank = 0;
      for (auto& t : trials)
        std::cout << fmt("  %3d %-15s %9.2f us %7.0f GB/s  regs %3d  err %7s  %s%s%s\n", ++rank,
                         t.screened ? "ok (screened)" : cache::to_string(t.status).c_str(), t.median_us, t.gbps,
                         t.registers,
                         t.verify_error >= 0 ? fmt("%.1e", t.verify_error).c_str() : "n/a",
                         t.config.dump().c_str(), t.message.empty() ? "" : "  ",
                         t.message.substr(0, t.message.find('\n')).c_str());
      std::cout << "\n";
    }
    if (o->json) std::cout << a.dump(2) << "\n";
    rc = kOk;
  });
}

}  // namespace qjit::cli
