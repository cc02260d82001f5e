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
#include "cache/record.h"
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/ops.h"
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
// Stops handing out work once `deadline_hit` says so and one compile has
// finished; unstarted ones stay !ok with an empty log and are dropped by the caller.
void compile_all(std::vector<Candidate>& cands, const std::string& arch, int threads,
                 const std::function<bool()>& deadline_hit, std::ostream* progress) {
  std::atomic<size_t> next{0}, done{0};
  std::mutex print;
  auto worker = [&] {
    for (size_t i; (i = next++) < cands.size();) {
      if (deadline_hit() && done > 0) return;  // (the first compile always finishes: something to measure)
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

// One call of the candidate's plan on copy 0 of the inputs, its output poisoned first, waited for.
CUresult call_on_poisoned_output(const runtime::LoadedPlan& p, runtime::RunPlan run, Workload& work, CUstream stream) {
  work.poison_output(stream);
  const CUresult r = run(p, work.args(0), stream);
  return r == CUDA_SUCCESS ? runtime::driver().cuStreamSynchronize(stream) : r;
}

// Calls the record's plan kWinnerLaunches times, each verified; "" when
// every call verified, else what failed.
std::string verify_repeatedly(const cache::KernelRecord& rec, const codegen::OpSpec& spec, runtime::RunPlan run,
                              Workload& work, CUstream stream) {
  const runtime::LoadedPlan p = runtime::load_record(rec, spec);
  const runtime::PlanGuard guard{p};
  int wrong = 0;
  std::string first;
  for (int i = 0; i < kWinnerLaunches; ++i) {
    if (const CUresult r = call_on_poisoned_output(p, run, work, stream); r != CUDA_SUCCESS)
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

namespace {

// One tuning run of one spec, in named steps (tune() below calls them in
// order): the floor, the candidates, their compiles, their measurement, the
// baselines, and the winner's confirmation.
class Tuning {
 public:
  Tuning(const codegen::OpSpec& spec, cache::Store& store, const TuneOptions& opt)
      : spec_(spec),
        store_(store),
        opt_(opt),
        out_(opt.progress),
        op_(codegen::find_op(spec.op)),
        run_(op_hooks(spec.op).run),
        dev_(runtime::current_device()),
        fp_(runtime::fingerprint(spec)),
        key_(fp_.key()) {
    rep_.spec_label = spec.label();
    rep_.key = key_;
    rep_.device = dev_.identity.name;
    rep_.arch = dev_.arch;
    rep_.bytes = op_.traffic(spec).bytes;
  }

  // Copy bandwidth: measured once per device, then read from the store.
  void measure_floor() {
    if (auto bw = store_.copy_bandwidth_gbps(dev_.key())) {
      rep_.copy_gbps = *bw;
    } else {
      if (out_) *out_ << "measuring copy bandwidth of " << dev_.identity.name << " ... " << std::flush;
      rep_.copy_gbps = measure_copy_bandwidth_gbps();
      store_.set_copy_bandwidth_gbps(dev_.key(), rep_.copy_gbps);
      if (out_) *out_ << static_cast<int>(rep_.copy_gbps) << " GB/s\n";
    }
    rep_.floor_us = rep_.bytes / (rep_.copy_gbps * 1e3);
  }

  // Imported configs first, then the op's space (or --only's configs);
  // those already measured for this key are skipped unless --retune.
  void select_candidates() {
    std::vector<nlohmann::json> configs;
    std::set<std::string> seen;
    if (opt_.only_configs.empty()) {
      for (const auto& imp : store_.imports(spec_.op, spec_.canonical_json()))
        if (seen.insert(imp.config.dump()).second) configs.push_back(imp.config);
      for (auto& c : op_.tunable_space(spec_, runtime::device_limits()))
        if (seen.insert(c.dump()).second) configs.push_back(c);
    } else {
      configs = opt_.only_configs;
    }
    rep_.candidates_total = static_cast<int>(configs.size());
    std::set<std::string> known;
    if (!opt_.retune)
      for (const auto& t : store_.trials(key_)) known.insert(t.config.dump());
    for (auto& c : configs) {
      if (known.count(c.dump())) {
        ++rep_.skipped_known;
        continue;
      }
      if (opt_.budget_candidates > 0 && static_cast<int>(cands_.size()) >= opt_.budget_candidates) break;
      try {
        cands_.push_back({c, codegen::generate_source(spec_, c), {}});
      } catch (const Error& e) {  // an imported config that is illegal here
        if (out_) *out_ << "  skipping config " << c.dump() << ": " << e.what() << "\n";
      }
    }
    if (out_)
      *out_ << "tuning " << spec_.label() << " on " << dev_.identity.name << " (" << dev_.arch
            << "): " << rep_.candidates_total << " candidates, " << rep_.skipped_known << " already measured, "
            << cands_.size() << " to run\n";
  }

  void compile() {
    const int threads = opt_.compile_threads > 0 ? opt_.compile_threads
                                                 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const auto compile_start = Clock::now();
    if (!cands_.empty()) {
      if (out_) *out_ << "compiling " << cands_.size() << " candidates on " << threads << " threads\n";
      compile_all(cands_, dev_.arch, threads, [this] { return deadline_hit(); }, out_);
    }
    rep_.compile_wall_s = seconds_since(compile_start);
    for (auto& c : cands_) rep_.compile_cpu_ms += c.compiled.compile_ms;
  }

  // Inputs are needed even when every candidate is known: the baselines run each time.
  void prepare_inputs() {
    const uint64_t seed = opt_.seed ? opt_.seed : std::random_device{}() * 0x100000001ull + std::random_device{}();
    if (out_) *out_ << "preparing inputs and the CPU reference ... " << std::flush;
    work_ = make_workload(spec_, seed, dev_.l2_bytes);
    if (out_) *out_ << work_->copies() << " weight copies rotated\n";
    QJIT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  }

  // Each candidate's plan: loaded, called once on poisoned output and
  // verified, then timed. Every candidate's trials reach the store when its
  // turn ends, however it ends (continue, or a driver error unwinding): a run
  // that stops loses nothing it measured.
  void measure_candidates() {
    struct FlushAtEnd {
      Tuning& t;
      ~FlushAtEnd() {
        try {
          t.flush();
        } catch (...) {  // unwinding already: the error in flight is the one to report
        }
      }
    };
    for (auto& c : cands_) {
      const FlushAtEnd flush_at_end{*this};
      if (c.compiled.log.empty() && !c.compiled.ok) continue;  // never started (deadline)
      if (!c.compiled.ok) {
        fail(c, cache::TrialStatus::compile_error, first_lines(c.compiled.log, 6));
        continue;
      }
      if (c.compiled.spill_bytes > 0) {
        fail(c, cache::TrialStatus::resource_error,
             "spills " + std::to_string(c.compiled.spill_bytes) + " bytes to local memory");
        continue;
      }
      // A time budget that ran out while compiling still measures candidates
      // until one verifies (in the space's order: the library path and the
      // simple kernels first), so a short --budget never ends with nothing.
      if (deadline_hit() && (measured_ > 0 || rep_.skipped_known > 0)) break;
      measure(c);
    }
    rep_.measured_now = measured_;
  }

  void measure_baselines() {
    std::string no_baseline;
    auto baselines = work_->baselines(&no_baseline);
    if (baselines.empty() && out_) *out_ << "no library baseline: " << no_baseline << "\n";
    for (auto& b : baselines) {
      const Verification v = check_baseline(*work_, b, stream_);
      Timing tm = time_launches([&](int i) { b.run(i % work_->copies(), stream_); }, stream_);
      rep_.baselines.push_back({b.name, tm.median_us, v.rel_error, v.ok, b.checked});
      auto* t = record({{"baseline", b.name}}, cache::TrialStatus::ok, v.ok ? "" : v.message, nullptr);
      t->median_us = tm.median_us;
      t->gbps = rep_.bytes / (tm.median_us * 1e3);
      t->verify_error = b.checked ? v.rel_error : -1;  // -1: not verified by design (TrialRecord)
      if (out_) {
        char line[256];
        std::snprintf(line, sizeof line, "  baseline %-22s %8.2f us %7.0f GB/s %5.1f%% of floor\n", b.name.c_str(),
                      tm.median_us, t->gbps, 100 * rep_.floor_us / tm.median_us);
        *out_ << line;
      }
    }
    flush();
  }

  // The winner over every ok trial of this key, this run's and earlier
  // ones', called kWinnerLaunches more times, each verified: one that fails
  // any is stored as wrong_result with the count (replacing its ok trial),
  // and the next one is tried. The confirmed winner is cached.
  void confirm_winner() {
    cache::KernelRecord rec;
    for (;;) {
      const auto all = store_.trials(key_);
      const cache::TrialRecord* best = choose_winner(all);
      if (!best)
        throw Error("tuner", "no candidate of " + spec_.label() + " compiled, ran and verified; see `qjit show`");
      // The winner was usually compiled in this run; one measured in an earlier run is compiled again.
      const auto it = verified_now_.find(best->config.dump());
      rec = it != verified_now_.end()
                ? cache::make_record(fp_, best->config, cands_[it->second].source, cands_[it->second].compiled, true)
                : cache::build_record(fp_, spec_, best->config, dev_.arch, /*tuned=*/true);
      rec.median_us = best->median_us;
      rec.gbps = best->gbps;
      rec.pct_copy_bw = 100.0 * best->gbps / rep_.copy_gbps;
      rec.verify_error = best->verify_error;
      if (out_) *out_ << "verifying the winner on " << kWinnerLaunches << " more launches ... " << std::flush;
      const std::string wrong = verify_repeatedly(rec, spec_, run_, *work_, stream_);
      if (wrong.empty()) {
        if (out_) *out_ << "ok\n";
        break;
      }
      if (out_) *out_ << "WRONG: " << wrong << "\n";
      cache::TrialRecord t = *best;
      t.status = cache::TrialStatus::wrong_result;
      t.message = wrong;
      store_.put_trials({t});
      ++rep_.failed_now;
    }
    rep_.trials = store_.trials(key_);
    store_.put(rec);
    cache::dump_if_requested(rec);
    rep_.best = rec;
    // A workload's baseline is a reference point, not a plan the runtime can
    // launch (the library paths that are, the cublas families of wq_gemm and
    // fused_ffn, are candidates): say so loudly when one is faster.
    for (const auto& b : rep_.baselines)
      if (out_ && (b.verified || !b.checked) && b.median_us < rec.median_us)
        *out_ << "WARNING: baseline " << b.name << " (" << b.median_us << " us) is faster than the best qjit plan ("
              << rec.median_us << " us) for " << spec_.label() << "\n";
  }

  TuneReport finish() {
    rep_.wall_s = seconds_since(start_);
    return std::move(rep_);
  }

  ~Tuning() {
    if (stream_) runtime::driver().cuStreamDestroy(stream_);
  }

 private:
  bool deadline_hit() const { return opt_.budget_seconds > 0 && seconds_since(start_) > opt_.budget_seconds; }

  cache::TrialRecord* record(const nlohmann::json& config, cache::TrialStatus st, const std::string& msg,
                             const codegen::CompileResult* cr) {
    cache::TrialRecord t;
    t.key = key_;
    t.config = config;
    t.status = st;
    t.message = msg;
    if (cr) t.compile_ms = cr->compile_ms, t.registers = cr->registers, t.spill_bytes = cr->spill_bytes;
    new_trials_.push_back(t);
    return &new_trials_.back();
  }
  cache::TrialRecord* fail(const Candidate& c, cache::TrialStatus st, const std::string& msg) {
    ++rep_.failed_now;
    return record(c.config, st, msg, &c.compiled);
  }
  void flush() {
    store_.put_trials({new_trials_.begin() + static_cast<std::ptrdiff_t>(stored_), new_trials_.end()});
    stored_ = new_trials_.size();
  }

  void measure(Candidate& c) {
    cache::KernelRecord rec;
    rec.fp = fp_;
    rec.config = c.config;
    rec.kernel_name = c.source.kernel_name;
    rec.cubin = c.compiled.cubin;
    runtime::LoadedPlan p;
    try {
      p = runtime::load_record(rec, spec_);
    } catch (const Error& e) {
      fail(c, cache::TrialStatus::resource_error, e.what());
      return;
    }
    const runtime::PlanGuard guard{p};
    // A plan with a library step (wq_gemm's cublas family) cannot run
    // without the library: a resource error, as a kernel too big for this GPU.
    if (const std::string why = runtime::plan_unavailable(p, stream_); !why.empty()) {
      fail(c, cache::TrialStatus::resource_error, "needs cuBLAS: " + why);
      return;
    }
    // Stored before the GPU runs the candidate, replaced by its result at
    // the end: if the process dies on it (a fault that poisons the context,
    // a hang that gets it killed), the next run finds it measured and skips
    // it instead of dying on it again (--retune tries it anyway).
    {
      cache::TrialRecord pending;
      pending.key = key_;
      pending.config = c.config;
      pending.status = cache::TrialStatus::wrong_result;
      pending.message = kUnfinishedTrial;
      store_.put_trials({pending});
    }
    Verification v;
    Timing tm;
    try {
      const CUresult r = call_on_poisoned_output(p, run_, *work_, stream_);
      if (r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES || r == CUDA_ERROR_INVALID_VALUE) {
        fail(c, cache::TrialStatus::resource_error, runtime::describe(r));
        return;
      }
      if (r != CUDA_SUCCESS) throw Error("driver", "candidate " + c.config.dump() + " failed: " + runtime::describe(r));
      v = work_->verify();
      if (!v.ok) {
        fail(c, cache::TrialStatus::wrong_result, v.message)->verify_error = v.rel_error;
        if (out_) *out_ << "  WRONG " << c.config.dump() << ": " << v.message << "\n";
        return;
      }
      tm = time_launches(
          [&](int i) {
            const CUresult rr = run_(p, work_->args(i % work_->copies()), stream_);
            if (rr != CUDA_SUCCESS) throw Error("driver", "candidate launch failed: " + runtime::describe(rr));
          },
          stream_);
    } catch (const Error& e) {
      // The context is unusable after most launch failures: record the
      // culprit with the driver's words (stored with the rest), then stop.
      record(c.config, cache::TrialStatus::wrong_result, e.what(), &c.compiled);
      throw;
    }
    auto* t = record(c.config, cache::TrialStatus::ok, "", &c.compiled);
    t->median_us = tm.median_us;
    t->gbps = rep_.bytes / (tm.median_us * 1e3);
    t->verify_error = v.rel_error;
    verified_now_[c.config.dump()] = static_cast<size_t>(&c - cands_.data());
    ++measured_;
    best_us_ = std::min(best_us_, tm.median_us);
    if (out_) {
      char line[256];
      std::snprintf(line, sizeof line, "  [%3d/%zu] %8.2f us %7.0f GB/s %5.1f%% of floor  best %.2f us  %s\n",
                    measured_, cands_.size(), tm.median_us, t->gbps, 100 * rep_.floor_us / tm.median_us, best_us_,
                    c.config.dump().c_str());
      *out_ << line;
    }
  }

  const Clock::time_point start_ = Clock::now();
  const codegen::OpSpec& spec_;
  cache::Store& store_;
  const TuneOptions& opt_;
  std::ostream* out_;
  const codegen::OpDef& op_;
  const runtime::RunPlan run_;
  const runtime::Device& dev_;
  const cache::Fingerprint fp_;
  const std::string key_;
  TuneReport rep_;
  std::vector<Candidate> cands_;
  std::unique_ptr<Workload> work_;
  CUstream stream_ = nullptr;
  std::vector<cache::TrialRecord> new_trials_;
  size_t stored_ = 0;  // new_trials_[0, stored_) are in the store
  std::map<std::string, size_t> verified_now_;  // config -> index in cands_: the winner need not compile again
  int measured_ = 0;
  double best_us_ = INFINITY;
};

}  // namespace

TuneReport tune(const codegen::OpSpec& spec, cache::Store& store, const TuneOptions& opt) {
  // Every trial is stored: say so before any GPU time rather than at the first write.
  if (store.read_only())
    throw Error("cache", "cache database '" + store.path() + "' is open read-only; tuning stores its results "
                         "(point QJIT_CACHE at a writable file)");
  Tuning t(spec, store, opt);
  t.measure_floor();
  t.select_candidates();
  t.compile();
  t.prepare_inputs();
  t.measure_candidates();
  t.measure_baselines();
  t.confirm_winner();
  return t.finish();
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
