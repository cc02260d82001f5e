// qjit tune / qjit bench.
#include <cctype>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include "cache/sha256.h"
#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "runtime/device.h"
#include "runtime/kernel_cache.h"
#include "tuner/bench.h"
#include "tuner/multi_device.h"
#include "tuner/tuner.h"

namespace qjit::cli {
namespace {

// "30s" / "2m" → seconds; "40" → candidates.
void parse_budget(const std::string& b, tuner::TuneOptions& o) {
  if (b.empty()) return;
  try {
    size_t used = 0;
    double v = std::stod(b, &used);
    std::string unit = b.substr(used);
    // (a count is compared with INT_MAX before the cast: converting a larger double is undefined)
    if (!std::isfinite(v) || v <= 0) throw std::invalid_argument("");
    if (unit == "s") o.budget_seconds = v;
    else if (unit == "m") o.budget_seconds = 60 * v;
    else if (unit.empty() && v <= INT_MAX && v == std::floor(v)) o.budget_candidates = static_cast<int>(v);
    else throw std::invalid_argument("");
  } catch (const std::logic_error&) {
    throw Error("argument", "malformed --budget '" + b + "' (expected seconds like 30s or 2m, or a candidate count like 40)");
  }
}

// Without a GPU: generate and NVRTC-compile the default kernel, write its
// source next to the cache and say how to read it.
int gpu_free_part(const std::vector<codegen::OpSpec>& specs, const std::string& arch, const std::string& cache_path,
                  const std::string& why) {
  // A bad --arch is a bad argument (exit 2), not a failed compile.
  if (!codegen::nvrtc_supports_arch(arch))
    throw Error("argument", "NVRTC " + codegen::nvrtc_version() + " cannot compile for --arch '" + arch +
                                "' (expected sm_XX, e.g. sm_80 or sm_90)");
  std::cout << "No usable GPU: " << why << ".\nTuning needs one. Doing the GPU-free part: generate the default "
            << "kernel and compile it for " << arch << " with NVRTC " << codegen::nvrtc_version() << ".\n";
  const auto dir = std::filesystem::path(cache_path).parent_path() / "sources";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error("cache", "cannot create " + dir.string() + " next to the cache '" + cache_path + "': " + ec.message());
  for (const auto& spec : specs) {
    const auto& op = codegen::find_op(spec.op);
    const auto config = op.default_config(spec);
    auto src = codegen::generate_source(spec, config);
    auto res = codegen::compile(src, arch);
    if (!res.ok) throw Error("nvrtc", "the default kernel of " + spec.label() + " did not compile", res.log);
    // The spec's own parameters name the file; a long one (a custom table) by its key instead.
    std::string name = spec.op;
    const nlohmann::json named = spec.key_params();  // items() would not keep a temporary alive
    for (auto& [k, v] : named.items())
      name += "_" + k + (v.is_string() ? v.get<std::string>() : v.dump());
    for (char& c : name)  // a file name, whatever a string parameter holds
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
    if (name.size() > 120) name = spec.op + "_" + cache::sha256_hex(spec.canonical_json()).substr(0, 16);
    const auto file = dir / (name + ".cu");
    std::ofstream out(file);
    out << src.text;
    out.close();
    if (!out)
      throw Error("cache", "cannot write " + file.string() + " next to the cache '" + cache_path + "'");
    std::cout << fmt("  %s: compiled in %.0f ms, %d registers, %d bytes spilled, cubin %s\n", spec.label().c_str(),
                     res.compile_ms, res.registers, res.spill_bytes, human_bytes(res.cubin.size()).c_str())
              << "  source: " << file.string() << "\n"
              << "  read it: qjit source --op " << spec.op << " --shape " << spec.shape_string() << " [--ptx]\n";
  }
  return kNoGpu;
}

}  // namespace

// The specs of a manifest (qjit repack --checkpoint --manifest, or
// tuned/models.jsonl): one JSON object per line with "op" and "shape", each
// expanded with the command's --m and --dtype as --op/--shape would be; a
// line's own "m" ("1-1024", "1,16") takes the place of --m. Other keys (a
// "models" note) are ignored.
std::vector<codegen::OpSpec> manifest_specs(const std::string& path, const SpecOptions& given) {
  std::istringstream lines(read_input_file("--manifest", path));
  std::vector<codegen::OpSpec> specs;
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "--manifest " + path + " line " + std::to_string(number);
    const nlohmann::json j = parse_json_input(line, where);
    if (!j.is_object() || !j.contains("op") || !j["op"].is_string() || !j.contains("shape") || !j["shape"].is_string())
      throw Error("argument", where + " needs {\"op\": ..., \"shape\": ...}: " + json_excerpt(j));
    SpecOptions one = given;
    one.op = j["op"].get<std::string>();
    one.shape = j["shape"].get<std::string>();
    if (j.contains("m")) {
      if (!j["m"].is_string())
        throw Error("argument", where + ": \"m\" must be a string like \"1-1024\": " + json_excerpt(j));
      one.m = j["m"].get<std::string>();
    }
    for (auto& spec : one.specs()) specs.push_back(std::move(spec));
  }
  if (specs.empty()) throw Error("argument", "--manifest " + path + " lists no spec");
  return specs;
}

void add_tune(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("tune", "tune kernels for a spec on this GPU and cache the winner");
  cmd->footer(std::string("Example: qjit tune --op fused_ffn --shape d=4096,h=11008 --m 1-8\n"
                          "         qjit tune --manifest specs.jsonl --m 1-16   (from qjit repack --checkpoint)\n") +
              kExitCodesHelp);
  struct Opts {
    SpecOptions spec;
    CacheOption cache;
    std::string budget, only, arch = "sm_90", manifest, devices;
    bool retune = false, json = false, quiet = false, exhaustive = false, missing = false;
    int threads = 0;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  o->spec.add_to(cmd, false);
  o->cache.add_to(cmd);
  cmd->add_option("--manifest", o->manifest,
                  "tune every spec of a manifest (qjit repack --checkpoint --manifest) instead of --op/--shape, "
                  "each with --m");
  cmd->add_option("--budget", o->budget,
                  "stop after this long (30s, 2m; past it, only until one candidate has verified) or this many new "
                  "candidates (40; the staged search screens at most that many more)");
  auto* retune = cmd->add_flag("--retune", o->retune, "measure again candidates that already have trials");
  cmd->add_flag("--missing", o->missing,
                "only the specs the cache holds no tuned kernel for on this GPU (goes on with a manifest's tune "
                "that was stopped)")
      ->excludes(retune);
  cmd->add_option("--only", o->only,
                  "tune only the candidates holding these keys, e.g. '{\"family\":\"wgmma\",\"ws\":1}' "
                  "(see qjit source --configs)");
  cmd->add_flag("--exhaustive", o->exhaustive,
                "compile, verify and time every candidate (default: the staged search, which screens part of "
                "the space and verifies and times the best few in full; docs/tuning.md)");
  cmd->add_option("--devices", o->devices,
                  "tune on these GPUs of one kind, a spec at a time each: all, or numbers like 0,1 "
                  "(default: one, QJIT_DEVICE or 0)");
  cmd->add_option("--seed", o->seed,
                  "fix the random inputs and the staged search's choices (default: fresh inputs, search seed 1)");
  cmd->add_option("--threads", o->threads, "compile threads (default: one per core)");
  cmd->add_option("--arch", o->arch, "without a GPU: target of the GPU-free compile")->capture_default_str();
  cmd->add_flag("--json", o->json, "print the result as JSON on stdout");
  cmd->add_flag("-q,--quiet", o->quiet, "no progress output (on stderr: stage, candidates left, time left)");
  cmd->callback([o, &rc] {
    if (o->manifest.empty() && o->spec.shape.empty()) throw Error("argument", "tune needs --shape (or --manifest FILE)");
    if (!o->manifest.empty() && !o->spec.shape.empty())
      throw Error("argument", "--manifest " + o->manifest + " lists its own shapes; drop --shape");
    auto specs = o->manifest.empty() ? o->spec.specs() : manifest_specs(o->manifest, o->spec);
    tuner::TuneOptions topt;
    parse_budget(o->budget, topt);
    topt.retune = o->retune;
    topt.compile_threads = o->threads;
    topt.progress = o->quiet ? nullptr : &std::cerr;
    topt.exhaustive = o->exhaustive;
    if (o->seed) topt.seed = o->seed, topt.search.seed = o->seed;
    // The list's syntax is checked before any GPU work (or the GPU-free part).
    if (!o->devices.empty()) tuner::parse_device_list(o->devices, -1);
    // The filter is checked against every spec's space before any GPU work (or the GPU-free part).
    std::vector<std::vector<nlohmann::json>> only(specs.size());
    if (!o->only.empty()) {
      const auto filter = nlohmann::json::parse(o->only, nullptr, /*allow_exceptions=*/false);
      if (filter.is_discarded()) throw Error("argument", "malformed --only '" + o->only + "' (expected a JSON object)");
      for (size_t i = 0; i < specs.size(); ++i)
        only[i] = tuner::select_configs(codegen::find_op(specs[i].op).tunable_space(specs[i]), filter);
    }
    std::string why;
    if (!runtime::gpu_available(&why)) {
      rc = gpu_free_part(specs, o->arch, o->cache.resolved(), why);
      return;
    }
    const std::string cache_path = o->cache.resolved();
    if (o->missing) {
      cache::Store store(cache_path);
      size_t kept = 0;
      for (size_t i = 0; i < specs.size(); ++i) {
        const auto have = store.lookup(runtime::fingerprint(specs[i]).key());
        if (have && have->tuned) continue;
        specs[kept] = specs[i];
        only[kept++] = only[i];
      }
      if (!o->quiet) std::cerr << specs.size() - kept << " of " << specs.size() << " spec(s) tuned already\n";
      specs.resize(kept);
      only.resize(kept);
      if (specs.empty()) {
        if (o->json) std::cout << "[]\n";
        rc = kOk;
        return;
      }
    }
    const bool devices_named = !o->devices.empty();
    nlohmann::json all = nlohmann::json::array();
    // One spec's result, as soon as it is known with one device.
    const auto print = [&](const codegen::OpSpec& spec, const tuner::TuneReport& rep) {
      if (o->json) {
        all.push_back(rep.to_json());
        return;
      }
      std::cout << fmt("%s: best %.2f us (%.0f GB/s, %.1f%% of the %.2f us floor) %s\n", spec.label().c_str(),
                       rep.best.median_us, rep.best.gbps, 100 * rep.floor_us / rep.best.median_us, rep.floor_us,
                       rep.best.config.dump().c_str());
      for (auto& b : rep.baselines)
        std::cout << fmt("  vs %s %.2f us: %.2fx\n", b.name.c_str(), b.median_us, b.median_us / rep.best.median_us);
      const std::string on = devices_named ? fmt(" on GPU %d", rep.device_ordinal) : "";
      const std::string cached = rep.compiles_cached ? fmt(", %d from the compile cache", rep.compiles_cached) : "";
      if (rep.search == "staged")
        std::cout << fmt("  staged search: %d screened, %d timed in full and verified now, %d known, %d failed; "
                         "%.1f s wall (screen %.1f s, of which waiting on %d compiles%s %.1f s; confirm %.1f s)%s\n",
                         rep.screened_now, rep.measured_now, rep.skipped_known, rep.failed_now, rep.wall_s,
                         rep.screen_wall_s, rep.compiles, cached.c_str(), rep.compile_wall_s, rep.confirm_wall_s,
                         on.c_str());
      else
        std::cout << fmt("  %d measured now, %d known, %d failed; %.1f s wall (compile %.1f s: %d compiles%s)%s\n",
                         rep.measured_now, rep.skipped_known, rep.failed_now, rep.wall_s, rep.compile_wall_s,
                         rep.compiles, cached.c_str(), on.c_str());
      std::cout << std::flush;
    };
    if (!o->devices.empty()) {
      const auto visible = runtime::visible_devices();
      const auto ordinals = tuner::parse_device_list(o->devices, static_cast<int>(visible.size()));
      std::vector<runtime::VisibleDevice> chosen;
      for (int d : ordinals) chosen.push_back(visible[static_cast<size_t>(d)]);
      tuner::require_one_kind(chosen);
      if (!o->quiet)
        std::cerr << "tuning " << specs.size() << " spec(s) on " << chosen.size() << " x " << chosen.front().name
                  << "\n";
      // (opened here first: a read-only or foreign cache is refused before any worker starts)
      if (cache::Store(cache_path).read_only())
        throw Error("cache", "cache database '" + cache_path + "' is open read-only; tuning stores its results "
                             "(point QJIT_CACHE at a writable file)");
      const auto reports = tuner::tune_on_devices(specs, only, topt, ordinals, cache_path, topt.progress);
      for (size_t i = 0; i < specs.size(); ++i) print(specs[i], reports[i]);
    } else {
      cache::Store store(cache_path);
      for (size_t i = 0; i < specs.size(); ++i) {
        topt.only_configs = only[i];
        print(specs[i], tuner::tune(specs[i], store, topt));
      }
    }
    if (o->json) std::cout << all.dump(2) << "\n";
    std::cerr << "cached in " << cache_path << "\n";
    rc = kOk;
  });
}

void add_bench(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("bench", "time the cached kernel against library baselines in one run");
  cmd->footer(kExitCodesHelp);
  struct Opts {
    SpecOptions spec;
    CacheOption cache;
    bool json = false;
    double sustain_s = 0;
  };
  auto o = std::make_shared<Opts>();
  o->spec.add_to(cmd, true);
  o->cache.add_to(cmd);
  cmd->add_flag("--json", o->json, "print the result as JSON on stdout");
  cmd->add_option("--sustain", o->sustain_s,
                  "also time each kernel looped back to back for this many seconds (0.1 to 60), where a GPU "
                  "runs at the clock its power limit allows")
      ->check(CLI::Range(0.1, 60.0));
  cmd->callback([o, &rc] {
    const auto specs = o->spec.specs();
    std::string why;
    if (!runtime::gpu_available(&why)) {
      std::cerr << "qjit bench: no usable GPU: " << why << "\n";
      rc = kNoGpu;
      return;
    }
    cache::Store store(o->cache.resolved());
    nlohmann::json all = nlohmann::json::array();
    for (const auto& spec : specs) {
      auto rep = tuner::bench(spec, store, o->sustain_s);
      if (o->json) all.push_back(rep.to_json());
      else std::cout << rep.table();
    }
    if (o->json) std::cout << all.dump(2) << "\n";
    rc = kOk;
  });
}

}  // namespace qjit::cli
