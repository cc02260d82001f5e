#include "tuner/tuner.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <ostream>
#include <random>
#include <set>
#include <thread>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Candidate {
  nlohmann::json config;
  codegen::GeneratedSource source;
  codegen::CompileResult compiled;
};

// Compiles every candidate on a small thread pool (NVRTC is thread-safe).
// Stops handing out work once `deadline_hit` says so; unstarted ones stay !ok
// with an empty log and are dropped by the caller.
void compile_all(std::vector<Candidate>& cands, const std::string& arch, int threads,
                 const std::function<bool()>& deadline_hit, std::ostream* progress) {
  std::atomic<size_t> next{0}, done{0};
  std::mutex print;
  auto worker = [&] {
    for (size_t i; (i = next++) < cands.size();) {
      if (deadline_hit()) return;
      try {
        cands[i].compiled = codegen::compile(cands[i].source, arch);
      } catch (const Error& e) {
        cands[i].compiled.log = e.what();
      }
      size_t n = ++done;
      if (progress && (n % 16 == 0 || n == cands.size())) {
        std::lock_guard<std::mutex> lock(print);
        *progress << "\r  compiled " << n << "/" << cands.size() << std::flush;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (progress) *progress << "\n";
}

std::string first_lines(const std::string& s, int n) {
  size_t pos = 0;
  for (int i = 0; i < n && pos != std::string::npos; ++i) pos = s.find('\n', pos + 1);
  return s.substr(0, pos);
}

// Unloads a loaded kernel's module when it goes out of scope.
struct ModuleGuard {
  CUmodule m;
  ~ModuleGuard() { runtime::driver().cuModuleUnload(m); }
};

// One launch of k on copy 0 of the inputs, its output poisoned first, waited for.
CUresult launch_on_poisoned_output(const runtime::LoadedKernel& k, Workload& work, CUstream stream) {
  work.poison_output(stream);
  const CUresult r = runtime::try_launch(k, work.args(0), stream);
  return r == CUDA_SUCCESS ? runtime::driver().cuStreamSynchronize(stream) : r;
}

// Launches the record's kernel kWinnerLaunches times, each verified; "" when
// every launch verified, else what failed.
std::string verify_repeatedly(const cache::KernelRecord& rec, const codegen::OpSpec& spec, Workload& work,
                              CUstream stream) {
  const runtime::LoadedKernel k = runtime::load_record(rec, spec);
  const ModuleGuard guard{k.module};
  int wrong = 0;
  std::string first;
  for (int i = 0; i < kWinnerLaunches; ++i) {
    if (const CUresult r = launch_on_poisoned_output(k, work, stream); r != CUDA_SUCCESS)
      throw Error("driver", "the winner " + rec.config.dump() + " failed on a repeat launch: " + runtime::describe(r));
    const Verification v = work.verify();
    if (!v.ok && wrong++ == 0) first = v.message;
  }
  if (wrong == 0) return "";
  return "verified once, then wrong on " + std::to_string(wrong) + " of " + std::to_string(kWinnerLaunches) +
         " more launches (a race?); the first: " + first;
}

}  // namespace

double config_complexity(const nlohmann::json& config) {
  double c = 1;
  for (auto& [k, v] : config.items())
    if (v.is_number()) c *= std::max(1.0, v.get<double>());
  return c;
}

const cache::TrialRecord* choose_winner(const std::vector<cache::TrialRecord>& trials) {
  const auto eligible = [](const cache::TrialRecord& t) {
    return t.status == cache::TrialStatus::ok && !t.config.contains("baseline");
  };
  double fastest = INFINITY;
  for (const auto& t : trials)
    if (eligible(t)) fastest = std::min(fastest, t.median_us);
  const cache::TrialRecord* best = nullptr;
  for (const auto& t : trials) {
    if (!eligible(t) || t.median_us > fastest * 1.01) continue;
    if (!best || config_complexity(t.config) < config_complexity(best->config) ||
        (config_complexity(t.config) == config_complexity(best->config) && t.config.dump() < best->config.dump()))
      best = &t;
  }
  return best;
}

std::vector<nlohmann::json> select_configs(const std::vector<nlohmann::json>& space, const nlohmann::json& filter) {
  if (!filter.is_object() || filter.empty())
    throw Error("argument", "--only takes a JSON object of config keys, e.g. '{\"family\":\"wgmma\"}', not '" +
                                filter.dump() + "'");
  std::vector<nlohmann::json> out;
  for (const auto& c : space) {
    bool all = true;
    for (const auto& [k, v] : filter.items()) all = all && c.is_object() && c.contains(k) && c.at(k) == v;
    if (all) out.push_back(c);
  }
  if (out.empty())
    throw Error("argument", "--only " + filter.dump() + " matches none of the " + std::to_string(space.size()) +
                                " candidates");
  return out;
}

TuneReport tune(const codegen::OpSpec& spec, cache::Store& store, const TuneOptions& opt) {
  const auto start = Clock::now();
  std::ostream* out = opt.progress;
  const auto& op = codegen::find_op(spec.op);
  const runtime::Device& dev = runtime::current_device();
  const cache::Fingerprint fp = runtime::fingerprint(spec);
  const std::string key = fp.key();
  auto deadline_hit = [&] { return opt.budget_seconds > 0 && seconds_since(start) > opt.budget_seconds; };

  TuneReport rep;
  rep.spec_label = spec.label();
  rep.key = key;
  rep.device = dev.identity.name;
  rep.arch = dev.arch;
  rep.bytes = op.traffic(spec).bytes;

  // Copy bandwidth: measured once per device, then read from the store.
  if (auto bw = store.copy_bandwidth_gbps(dev.key())) {
    rep.copy_gbps = *bw;
  } else {
    if (out) *out << "measuring copy bandwidth of " << dev.identity.name << " ... " << std::flush;
    rep.copy_gbps = measure_copy_bandwidth_gbps();
    store.set_copy_bandwidth_gbps(dev.key(), rep.copy_gbps);
    if (out) *out << static_cast<int>(rep.copy_gbps) << " GB/s\n";
  }
  rep.floor_us = rep.bytes / (rep.copy_gbps * 1e3);

  // Candidate list: imported configs first, then the op's space; skip those
  // already measured for this key unless --retune.
  std::vector<nlohmann::json> configs;
  std::set<std::string> seen;
  for (const auto& imp : store.imports(spec.op, spec.canonical_json()))
    if (seen.insert(imp.config.dump()).second) configs.push_back(imp.config);
  if (opt.only_configs.empty()) {
    for (auto& c : op.tunable_space(spec))
      if (seen.insert(c.dump()).second) configs.push_back(c);
  } else {
    configs.clear();
    for (auto& c : opt.only_configs) configs.push_back(c);
  }
  rep.candidates_total = static_cast<int>(configs.size());
  std::set<std::string> known;
  if (!opt.retune)
    for (const auto& t : store.trials(key)) known.insert(t.config.dump());
  std::vector<Candidate> cands;
  for (auto& c : configs) {
    if (known.count(c.dump())) {
      ++rep.skipped_known;
      continue;
    }
    if (opt.budget_candidates > 0 && static_cast<int>(cands.size()) >= opt.budget_candidates) break;
    try {
      cands.push_back({c, codegen::generate_source(spec, c), {}});
    } catch (const Error& e) {  // an imported config that is illegal here
      if (out) *out << "  skipping config " << c.dump() << ": " << e.what() << "\n";
    }
  }
  if (out)
    *out << "tuning " << spec.label() << " on " << dev.identity.name << " (" << dev.arch << "): "
         << rep.candidates_total << " candidates, " << rep.skipped_known << " already measured, " << cands.size()
         << " to run\n";

  std::vector<cache::TrialRecord> new_trials;
  auto record = [&](const nlohmann::json& config, cache::TrialStatus st, const std::string& msg,
                    const codegen::CompileResult* cr) {
    cache::TrialRecord t;
    t.key = key;
    t.config = config;
    t.status = st;
    t.message = msg;
    if (cr) t.compile_ms = cr->compile_ms, t.registers = cr->registers, t.spill_bytes = cr->spill_bytes;
    new_trials.push_back(t);
    return &new_trials.back();
  };

  // 1. Compile in parallel.
  const int threads = opt.compile_threads > 0 ? opt.compile_threads
                                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto compile_start = Clock::now();
  if (!cands.empty()) {
    if (out) *out << "compiling " << cands.size() << " candidates on " << threads << " threads\n";
    compile_all(cands, dev.arch, threads, deadline_hit, out);
  }
  rep.compile_wall_s = seconds_since(compile_start);
  for (auto& c : cands) rep.compile_cpu_ms += c.compiled.compile_ms;

  // 2. Load, verify, time.
  std::unique_ptr<Workload> work;
  std::string no_baseline;
  std::vector<Baseline> baselines;
  const uint64_t seed = opt.seed ? opt.seed : std::random_device{}() * 0x100000001ull + std::random_device{}();
  // Inputs are needed even when every candidate is known: the baselines run each time.
  if (out) *out << "preparing inputs and the CPU reference ... " << std::flush;
  work = make_workload(spec, seed, dev.l2_bytes);
  if (out) *out << work->copies() << " weight copies rotated\n";
  CUstream stream = nullptr;
  QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  struct StreamGuard {
    CUstream s;
    ~StreamGuard() { runtime::driver().cuStreamDestroy(s); }
  } guard{stream};

  double best_us = INFINITY;
  std::map<std::string, size_t> verified_now;  // config -> index in cands: the winner need not compile again
  int measured = 0;
  // Every candidate's trials reach the store when its turn ends, however it
  // ends (continue, or a driver error unwinding): a run that stops loses
  // nothing it measured.
  size_t stored = 0;  // new_trials[0, stored) are in the store
  const auto flush = [&] {
    store.put_trials({new_trials.begin() + static_cast<std::ptrdiff_t>(stored), new_trials.end()});
    stored = new_trials.size();
  };
  struct FlushAtEnd {
    const std::function<void()> flush;
    ~FlushAtEnd() {
      try {
        flush();
      } catch (...) {  // unwinding already: the error in flight is the one to report
      }
    }
  };
  for (auto& c : cands) {
    const FlushAtEnd flush_at_end{flush};
    if (c.compiled.log.empty() && !c.compiled.ok) continue;  // never started (deadline)
    if (!c.compiled.ok) {
      record(c.config, cache::TrialStatus::compile_error, first_lines(c.compiled.log, 6), &c.compiled);
      ++rep.failed_now;
      continue;
    }
    if (c.compiled.spill_bytes > 0) {
      record(c.config, cache::TrialStatus::resource_error,
             "spills " + std::to_string(c.compiled.spill_bytes) + " bytes to local memory", &c.compiled);
      ++rep.failed_now;
      continue;
    }
    if (deadline_hit()) break;
    cache::KernelRecord rec;
    rec.fp = fp;
    rec.config = c.config;
    rec.kernel_name = c.source.kernel_name;
    rec.cubin = c.compiled.cubin;
    runtime::LoadedKernel k;
    try {
      k = runtime::load_record(rec, spec);
    } catch (const Error& e) {
      record(c.config, cache::TrialStatus::resource_error, e.what(), &c.compiled);
      ++rep.failed_now;
      continue;
    }
    const ModuleGuard mguard{k.module};
    // A candidate that multiplies with cuBLAS (wq_gemm's "cublas" family)
    // cannot run without it: a resource error, as a kernel too big for this GPU.
    if (k.geometry.dense_gemm.on) {
      if (const std::string why = runtime::dense_gemm_unavailable(stream); !why.empty()) {
        record(c.config, cache::TrialStatus::resource_error, "needs cuBLAS: " + why, &c.compiled);
        ++rep.failed_now;
        continue;
      }
    }
    // Stored before the GPU runs the candidate, replaced by its result at
    // the end: if the process dies on it (a fault that poisons the context,
    // a hang that gets it killed), the next run finds it measured and skips
    // it instead of dying on it again (--retune tries it anyway).
    {
      cache::TrialRecord pending;
      pending.key = key;
      pending.config = c.config;
      pending.status = cache::TrialStatus::wrong_result;
      pending.message = kUnfinishedTrial;
      store.put_trials({pending});
    }
    Verification v;
    Timing tm;
    try {
      // Verify on copy 0, output poisoned first.
      const CUresult r = launch_on_poisoned_output(k, *work, stream);
      if (r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES || r == CUDA_ERROR_INVALID_VALUE) {
        record(c.config, cache::TrialStatus::resource_error, runtime::describe(r), &c.compiled);
        ++rep.failed_now;
        continue;
      }
      if (r != CUDA_SUCCESS) throw Error("driver", "candidate " + c.config.dump() + " failed: " + runtime::describe(r));
      v = work->verify();
      if (!v.ok) {
        auto* t = record(c.config, cache::TrialStatus::wrong_result, v.message, &c.compiled);
        t->verify_error = v.rel_error;
        ++rep.failed_now;
        if (out) *out << "  WRONG " << c.config.dump() << ": " << v.message << "\n";
        continue;
      }
      tm = time_launches([&](int i) { runtime::launch(k, work->args(i % work->copies()), stream); }, stream);
    } catch (const Error& e) {
      // The context is unusable after most launch failures: record the
      // culprit with the driver's words (stored with the rest), then stop.
      record(c.config, cache::TrialStatus::wrong_result, e.what(), &c.compiled);
      throw;
    }
    auto* t = record(c.config, cache::TrialStatus::ok, "", &c.compiled);
    t->median_us = tm.median_us;
    t->gbps = rep.bytes / (tm.median_us * 1e3);
    t->verify_error = v.rel_error;
    verified_now[c.config.dump()] = static_cast<size_t>(&c - cands.data());
    ++measured;
    best_us = std::min(best_us, tm.median_us);
    if (out) {
      char line[256];
      std::snprintf(line, sizeof line, "  [%3d/%zu] %8.2f us %7.0f GB/s %5.1f%% of floor  best %.2f us  %s\n",
                    measured, cands.size(), tm.median_us, t->gbps, 100 * rep.floor_us / tm.median_us, best_us,
                    c.config.dump().c_str());
      *out << line;
    }
  }
  rep.measured_now = measured;

  // 3. Baselines, measured in this run.
  baselines = work->baselines(&no_baseline);
  if (baselines.empty() && out) *out << "no library baseline: " << no_baseline << "\n";
  for (auto& b : baselines) {
    const Verification v = check_baseline(*work, b, stream);
    Timing tm = time_launches([&](int i) { b.run(i % work->copies(), stream); }, stream);
    BaselineResult br{b.name, tm.median_us, v.rel_error, v.ok, b.checked};
    rep.baselines.push_back(br);
    auto* t = record({{"baseline", b.name}}, cache::TrialStatus::ok, v.ok ? "" : v.message, nullptr);
    t->median_us = tm.median_us;
    t->gbps = rep.bytes / (tm.median_us * 1e3);
    t->verify_error = b.checked ? v.rel_error : -1;  // -1: not verified by design (TrialRecord)
    if (out) {
      char line[256];
      std::snprintf(line, sizeof line, "  baseline %-22s %8.2f us %7.0f GB/s %5.1f%% of floor\n", b.name.c_str(),
                    tm.median_us, t->gbps, 100 * rep.floor_us / tm.median_us);
      *out << line;
    }
  }
  flush();

  // 4. Winner over every ok trial of this key, this run's and earlier ones',
  //    launched kWinnerLaunches more times, each verified: one that fails any
  //    is stored as wrong_result with the count (replacing its ok trial), and
  //    the next one is tried.
  cache::KernelRecord rec;
  for (;;) {
    const auto all = store.trials(key);
    const cache::TrialRecord* best = choose_winner(all);
    if (!best) throw Error("tuner", "no candidate of " + spec.label() + " compiled, ran and verified; see `qjit show`");
    // The winner was usually compiled in this run; one measured in an earlier run is compiled again.
    const auto it = verified_now.find(best->config.dump());
    rec = it != verified_now.end()
              ? runtime::make_record(spec, best->config, cands[it->second].source, cands[it->second].compiled, true)
              : runtime::build_record(spec, best->config, /*tuned=*/true);
    rec.median_us = best->median_us;
    rec.gbps = best->gbps;
    rec.pct_copy_bw = 100.0 * best->gbps / rep.copy_gbps;
    rec.verify_error = best->verify_error;
    if (out) *out << "verifying the winner on " << kWinnerLaunches << " more launches ... " << std::flush;
    const std::string wrong = verify_repeatedly(rec, spec, *work, stream);
    if (wrong.empty()) {
      if (out) *out << "ok\n";
      break;
    }
    if (out) *out << "WRONG: " << wrong << "\n";
    cache::TrialRecord t = *best;
    t.status = cache::TrialStatus::wrong_result;
    t.message = wrong;
    store.put_trials({t});
    ++rep.failed_now;
  }
  rep.trials = store.trials(key);
  store.put(rec);
  runtime::dump_if_requested(rec);
  rep.best = rec;
  rep.wall_s = seconds_since(start);
  // The runtime launches qjit kernels only; say so loudly when a library path wins.
  for (const auto& b : rep.baselines)
    if (out && (b.verified || !b.checked) && b.median_us < rec.median_us)
      *out << "WARNING: baseline " << b.name << " (" << b.median_us << " us) is faster than the best qjit kernel ("
           << rec.median_us << " us) for " << spec.label() << "\n";
  return rep;
}

nlohmann::json TuneReport::to_json() const {
  nlohmann::json j;
  j["spec"] = spec_label;
  j["key"] = key;
  j["device"] = device;
  j["arch"] = arch;
  j["best"] = {{"config", best.config},     {"median_us", best.median_us}, {"gbps", best.gbps},
               {"pct_of_floor", best.median_us > 0 ? 100 * floor_us / best.median_us : 0},
               {"registers", best.registers}, {"spill_bytes", best.spill_bytes}, {"verify_error", best.verify_error}};
  j["floor_us"] = floor_us;
  j["bytes"] = bytes;
  j["copy_gbps"] = copy_gbps;
  j["candidates_total"] = candidates_total;
  j["measured_now"] = measured_now;
  j["skipped_known"] = skipped_known;
  j["failed_now"] = failed_now;
  j["wall_s"] = wall_s;
  j["compile_wall_s"] = compile_wall_s;
  j["baselines"] = nlohmann::json::array();
  for (auto& b : baselines)
    j["baselines"].push_back({{"name", b.name}, {"median_us", b.median_us}, {"rel_error", b.rel_error},
                              {"verified", b.verified}, {"checked", b.checked}, {"speedup", b.median_us / best.median_us}});
  return j;
}

}  // namespace qjit::tuner
