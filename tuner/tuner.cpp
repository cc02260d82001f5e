#include "tuner/tuner.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <ostream>
#include <random>
#include <set>
#include <thread>
#include "cache/compile_cache.h"
#include "cache/record.h"
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/compile_queue.h"
#include "tuner/ops.h"
#include "tuner/progress.h"
#include "tuner/shipped.h"
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
  bool reused = false;  // its source compiled once for an earlier candidate
};

// The screen's timing: a few samples, enough to rank candidates within a
// few percent; the contenders are then timed in full (time_launches'
// defaults) and verified.
constexpr int kScreenWarmup = 2, kScreenSamples = 7;

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
    return t.status == cache::TrialStatus::ok && !t.screened && !t.config.contains("baseline");
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
// order): the floor, the candidates, then either the exhaustive search
// (compile all, measure each) or the staged search (screen, confirm), the
// baselines, and the winner's confirmation.
class Tuning {
 public:
  Tuning(const codegen::OpSpec& spec, cache::Store& store, const TuneOptions& opt)
      : spec_(spec),
        store_(store),
        opt_(opt),
        out_(opt.progress),
        say_(opt.progress),
        op_(codegen::find_op(spec.op)),
        run_(op_hooks(spec.op).run),
        dev_(runtime::current_device()),
        fp_(runtime::fingerprint(spec)),
        key_(fp_.key()),
        compile_cache_(opt.compile_cache),
        compile_(cached_compile(compile_cache_)) {
    if (!opt.compile_cache.empty() && !compile_cache_.enabled()) say_.note(compile_cache_.why());
    rep_.spec_label = spec.label();
    rep_.key = key_;
    rep_.device = dev_.identity.name;
    rep_.device_ordinal = dev_.ordinal;
    rep_.arch = dev_.arch;
    rep_.bytes = op_.traffic(spec).bytes;
    rep_.search = opt.exhaustive ? "exhaustive" : "staged";
  }

  // Copy bandwidth: measured once per device, then read from the store.
  void measure_floor() {
    if (auto bw = store_.copy_bandwidth_gbps(dev_.key())) {
      rep_.copy_gbps = *bw;
    } else {
      say_.bandwidth_start(dev_.identity.name);
      rep_.copy_gbps = measure_copy_bandwidth_gbps();
      store_.set_copy_bandwidth_gbps(dev_.key(), rep_.copy_gbps);
      say_.bandwidth_done(rep_.copy_gbps);
    }
    rep_.floor_us = rep_.bytes / (rep_.copy_gbps * 1e3);
  }

  // Imported configs first, then the op's space (or --only's configs),
  // with what earlier runs stored for each.
  void select_candidates() {
    std::set<std::string> seen;
    if (opt_.only_configs.empty()) {
      std::vector<nlohmann::json> first;
      for (const auto& imp : store_.imports(spec_.op, spec_.canonical_json())) first.push_back(imp.config);
      if (opt_.seed_from_shipped)
        for (auto& c : shipped_configs(spec_, dev_.identity, out_)) first.push_back(std::move(c));
      for (const auto& c : first)
        if (seen.insert(c.dump()).second) {
          configs_.push_back(c);
          imported_.push_back(c);
        }
      for (auto& c : op_.tunable_space(spec_, runtime::device_limits()))
        if (seen.insert(c.dump()).second) configs_.push_back(c);
    } else {
      configs_ = opt_.only_configs;
    }
    rep_.candidates_total = static_cast<int>(configs_.size());
    if (!opt_.retune)
      for (const auto& t : store_.trials(key_)) known_[t.config.dump()] = t;
    if (opt_.exhaustive) select_all_unknown();
  }

  // ---- the exhaustive search: every candidate not measured before ----

  // Those already measured for this key are skipped unless --retune (a
  // screened-only trial is not a measurement: it is timed in full now).
  void select_all_unknown() {
    for (auto& c : configs_) {
      const auto it = known_.find(c.dump());
      if (it != known_.end() && !(it->second.status == cache::TrialStatus::ok && it->second.screened)) {
        ++rep_.skipped_known;
        continue;
      }
      if (opt_.budget_candidates > 0 && static_cast<int>(cands_.size()) >= opt_.budget_candidates) break;
      try {
        cands_.push_back({c, codegen::generate_source(spec_, c), {}});
      } catch (const Error& e) {  // an imported config that is illegal here
        say_.skipping(c, e.what());
      }
    }
    say_.exhaustive_start(spec_.label(), dev_.identity.name, dev_.arch, rep_.candidates_total, rep_.skipped_known,
                          cands_.size());
  }

  void compile_all() {
    const auto compile_start = Clock::now();
    if (!cands_.empty()) {
      say_.compiling(cands_.size(), threads());
      CompileQueue queue(dev_.arch, threads(), compile_, [this] { return deadline_hit(); });
      for (size_t i = 0; i < cands_.size(); ++i) queue.add(i, cands_[i].source);
      size_t n = 0;
      while (const auto id = queue.next()) {
        Candidate& c = cands_[*id];
        // Unstarted (deadline): !ok with an empty log, dropped by measure_all.
        if (queue.started(*id)) c.compiled = queue.result(*id), c.reused = queue.reused(*id);
        ++n;
        say_.compiled(n, cands_.size(),
                      seconds_since(compile_start) / static_cast<double>(n) * static_cast<double>(cands_.size() - n));
      }
      say_.compiles_done();
      rep_.compiles = static_cast<int>(queue.compiles());
    }
    rep_.compile_wall_s = seconds_since(compile_start);
    for (auto& c : cands_) count_compile(c);
  }

  // Each candidate's plan: loaded, called once on poisoned output and
  // verified, then timed. Every candidate's trials reach the store when its
  // turn ends, however it ends (continue, or a driver error unwinding): a run
  // that stops loses nothing it measured.
  void measure_all() {
    const auto measure_start = Clock::now();
    if (!cands_.empty()) say_.measuring();
    size_t turn = 0;
    for (auto& c : cands_) {
      ++turn;
      const FlushAtEnd flush_at_end{*this};
      if (c.compiled.log.empty() && !c.compiled.ok) continue;  // never started (deadline)
      // A time budget that ran out while compiling still measures candidates
      // until one verifies (in the space's order: the library path and the
      // simple kernels first), so a short --budget never ends with nothing.
      if (c.compiled.ok && c.compiled.spill_bytes <= 0 && deadline_hit() && (measured_ > 0 || rep_.skipped_known > 0))
        break;
      const MeasuredUs us = measure(c, /*screen=*/false);
      if (us) {
        const double per = seconds_since(measure_start) / static_cast<double>(turn);
        say_.measured(measured_, cands_.size(), *us, rep_.bytes / (*us * 1e3), 100 * rep_.floor_us / *us, best_us_,
                      per * static_cast<double>(cands_.size() - turn), c.config);
      }
    }
    rep_.measured_now = measured_;
  }

  // ---- the staged search ----

  void staged_search() {
    SearchSettings set = opt_.search;
    std::vector<nlohmann::json> seeds = imported_;
    seeds.push_back(op_.default_config(spec_));
    if (opt_.seed_from_neighbours)
      for (auto& c : neighbour_seeds()) seeds.push_back(std::move(c));
    // What earlier runs measured: a full ok trial is a screen result and a
    // confirmation (verified already); a screened one a screen result; a
    // failure, a failed screen. --budget N screens N more.
    std::vector<std::pair<size_t, const cache::TrialRecord*>> known;
    for (size_t i = 0; i < configs_.size(); ++i)
      if (const auto it = known_.find(configs_[i].dump()); it != known_.end()) known.push_back({i, &it->second});
    rep_.skipped_known = static_cast<int>(known.size());
    if (opt_.budget_candidates > 0) set.max_screened = static_cast<int>(known.size()) + opt_.budget_candidates;
    StagedSearch search(configs_, seeds, set);
    for (const auto& [i, t] : known) {
      if (t->status != cache::TrialStatus::ok) {
        search.record(i, std::nullopt);
        continue;
      }
      search.record(i, t->median_us);
      if (!t->screened) confirmed_before_[i] = t->median_us;
    }
    say_.staged_start(spec_.label(), dev_.identity.name, dev_.arch, set.seed, rep_.candidates_total,
                      rep_.skipped_known);

    CompileQueue queue(dev_.arch, threads(), compile_, [this] { return deadline_hit(); });
    SearchHooks hooks;
    hooks.screen = [&](const std::vector<size_t>& batch) { return screen_batch(search, queue, batch); };
    hooks.confirm = [&](size_t i) { return confirm(i); };
    hooks.stop = [this] { return deadline_hit(); };
    size_t dropped_shown = 0;
    hooks.progress = [&](const StagedSearch& s) {
      for (; dropped_shown < s.dropped().size(); ++dropped_shown) say_.family_dropped(s.dropped()[dropped_shown]);
    };
    run_staged_search(search, hooks);
    rep_.families_dropped = search.dropped();
    rep_.compiles += static_cast<int>(queue.compiles());
    rep_.measured_now = measured_;
    rep_.screened_now = screened_;
  }

  void measure_baselines() {
    if (!opt_.baselines) return;
    std::string no_baseline;
    auto baselines = work_->baselines(&no_baseline);
    if (baselines.empty()) say_.no_baseline(no_baseline);
    for (auto& b : baselines) {
      const Verification v = check_baseline(*work_, b, stream_);
      Timing tm = time_launches([&](int i) { b.run(i % work_->copies(), stream_); }, stream_);
      rep_.baselines.push_back({b.name, tm.median_us, v.rel_error, v.ok, b.checked});
      auto* t = record({{"baseline", b.name}}, cache::TrialStatus::ok, v.ok ? "" : v.message, nullptr);
      t->median_us = tm.median_us;
      t->gbps = rep_.bytes / (tm.median_us * 1e3);
      t->verify_error = b.checked ? v.rel_error : -1;  // -1: not verified by design (TrialRecord)
      say_.baseline(b.name, tm.median_us, t->gbps, 100 * rep_.floor_us / tm.median_us);
    }
    flush();
  }

  // Inputs are needed even when every candidate is known: the baselines run each time.
  void prepare_inputs() {
    const uint64_t seed = opt_.seed ? opt_.seed : std::random_device{}() * 0x100000001ull + std::random_device{}();
    say_.preparing_inputs();
    work_ = make_workload(spec_, seed, dev_.l2_bytes);
    say_.inputs_ready(work_->copies());
    QJIT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
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
      const auto it = compiled_now_.find(best->config.dump());
      rec = it != compiled_now_.end()
                ? cache::make_record(fp_, best->config, it->second->source, it->second->compiled, true)
                : cache::build_record(fp_, spec_, best->config, dev_.arch, /*tuned=*/true);
      rec.median_us = best->median_us;
      rec.gbps = best->gbps;
      rec.pct_copy_bw = 100.0 * best->gbps / rep_.copy_gbps;
      rec.verify_error = best->verify_error;
      say_.verifying_winner(kWinnerLaunches);
      const std::string wrong = verify_repeatedly(rec, spec_, run_, *work_, stream_);
      if (wrong.empty()) {
        say_.winner_verified();
        break;
      }
      say_.winner_wrong(wrong);
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
      if ((b.verified || !b.checked) && b.median_us < rec.median_us)
        say_.baseline_faster(b.name, b.median_us, rec.median_us, spec_.label());
  }

  TuneReport finish() {
    rep_.wall_s = seconds_since(start_);
    // (A compile the cache answered was counted as a compile: it ran no NVRTC.)
    rep_.compiles_cached = static_cast<int>(compile_cache_.hits());
    rep_.compiles -= rep_.compiles_cached;
    return std::move(rep_);
  }

  ~Tuning() {
    if (stream_) runtime::driver().cuStreamDestroy(stream_);
  }

 private:
  struct FlushAtEnd {
    Tuning& t;
    ~FlushAtEnd() {
      try {
        t.flush();
      } catch (...) {  // unwinding already: the error in flight is the one to report
      }
    }
  };

  int threads() const {
    return opt_.compile_threads > 0 ? opt_.compile_threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  bool deadline_hit() const { return opt_.budget_seconds > 0 && seconds_since(start_) > opt_.budget_seconds; }

  void count_compile(const Candidate& c) {
    if (c.reused) ++rep_.compiles_reused;
    else rep_.compile_cpu_ms += c.compiled.compile_ms;
  }

  // The cached winners, and the two best full trials, of the same op and
  // device whose spec differs from this one only in m: the nearest two m
  // (by ratio). Neighbouring buckets of wq_gemm usually share a family and
  // most of a config.
  std::vector<nlohmann::json> neighbour_seeds() {
    nlohmann::json mine = nlohmann::json::parse(spec_.canonical_json(), nullptr, false);
    if (!mine.is_object() || !mine.contains("m") || !mine["m"].is_number() || mine["m"].get<double>() <= 0) return {};
    const double m = mine["m"].get<double>();
    mine.erase("m");
    std::vector<std::pair<double, cache::KernelRecord>> near;
    for (auto& r : store_.list(false)) {
      if (r.fp.op != spec_.op || r.fp.device.name != dev_.identity.name || !r.tuned || r.key() == key_) continue;
      nlohmann::json theirs = nlohmann::json::parse(r.fp.spec_json, nullptr, false);
      if (!theirs.is_object() || !theirs.contains("m") || !theirs["m"].is_number()) continue;
      const double their_m = theirs["m"].get<double>();
      theirs.erase("m");
      if (their_m <= 0 || theirs != mine) continue;
      near.push_back({std::abs(std::log2(their_m / m)), std::move(r)});
    }
    std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<nlohmann::json> out;
    for (size_t j = 0; j < near.size() && j < 2; ++j) {
      out.push_back(near[j].second.config);
      int runners_up = 0;
      for (const auto& t : store_.trials(near[j].second.key()))
        if (t.status == cache::TrialStatus::ok && !t.screened && !t.config.contains("baseline") && runners_up++ < 3)
          out.push_back(t.config);
    }
    return out;
  }

  Candidate& candidate(size_t i) {
    if (auto it = staged_.find(i); it != staged_.end()) return *it->second;
    cands_.push_back({configs_[i], {}, {}});
    Candidate& c = cands_.back();
    staged_[i] = &c;
    return c;
  }

  // Compiles the batch's candidates and screens each as its compile ends
  // (the GPU works while the pool compiles the rest). Every screen result
  // is stored when its candidate's turn ends.
  ScreenResults screen_batch(StagedSearch& search, CompileQueue& queue, const std::vector<size_t>& batch) {
    const auto batch_start = Clock::now();
    say_.batch_start(search.stage(), batch.size(), search.screened());
    ScreenResults results;
    size_t queued = 0;
    for (size_t i : batch) {
      Candidate& c = candidate(i);
      try {
        c.source = codegen::generate_source(spec_, c.config);
      } catch (const Error& e) {  // an imported config that is illegal here
        say_.skipping(c.config, e.what());
        results.push_back({i, std::nullopt});
        continue;
      }
      queue.add(i, c.source);
      ++queued;
    }
    double compile_wait = 0;
    const double best_before = best_screen_;
    for (size_t n = 0; n < queued; ++n) {
      const auto wait_start = Clock::now();
      const auto id = queue.next();
      compile_wait += seconds_since(wait_start);
      if (!id) break;
      Candidate& c = candidate(*id);
      if (!queue.started(*id)) continue;  // the budget ran out before its compile: unscreened
      c.compiled = queue.result(*id);
      c.reused = queue.reused(*id);
      count_compile(c);
      const FlushAtEnd flush_at_end{*this};
      const MeasuredUs us = measure(c, /*screen=*/true);
      results.push_back({*id, us});
      if (us) {
        ++screened_;
        if (*us < best_screen_) best_screen_ = *us, best_screen_config_ = c.config.dump();
      }
    }
    rep_.compile_wall_s += compile_wait;
    const double took = seconds_since(batch_start);
    rep_.screen_wall_s += took;
    screen_per_candidate_ = rep_.screen_wall_s / std::max<double>(1, screened_ + rep_.failed_now);
    say_.batch_done(search.stage(), results.size(), took, compile_wait, best_screen_, best_screen_ < best_before,
                    best_screen_config_);
    // What is left: the search's guess of configs still to screen, the
    // contenders' full timing and verification, the winner's 16 launches.
    if (say_.on()) search_eta_line(search);
    return results;
  }

  void search_eta_line(const StagedSearch& search) {
    const double per_confirm = measured_ > 0 ? rep_.confirm_wall_s / measured_ : 3 * screen_per_candidate_;
    const size_t left = search.expected_left();
    const double eta = static_cast<double>(left) * screen_per_candidate_ +
                       static_cast<double>(opt_.search.contenders) * per_confirm + per_confirm;
    say_.remaining(left, opt_.search.contenders, eta);
  }

  // A contender: timed in full and verified now, or its full trial from an
  // earlier run (verified then).
  MeasuredUs confirm(size_t i) {
    if (auto it = confirmed_before_.find(i); it != confirmed_before_.end()) {
      say_.confirmed_before(configs_[i], it->second);
      return it->second;
    }
    const auto start = Clock::now();
    Candidate& c = candidate(i);
    if (c.compiled.cubin.empty() && c.compiled.log.empty()) {
      // Screened by an earlier run: compiled now, here (a budget that ran
      // out stops the queue's compiles, not a contender's).
      try {
        c.source = codegen::generate_source(spec_, c.config);
        c.compiled = compile_(c.source, dev_.arch);
      } catch (const Error& e) {
        c.compiled.ok = false;
        c.compiled.log = e.what();
      }
      count_compile(c);
      ++rep_.compiles;
    }
    const FlushAtEnd flush_at_end{*this};
    const MeasuredUs us = measure(c, /*screen=*/false);
    rep_.confirm_wall_s += seconds_since(start);
    if (us) say_.confirmed(*us, 100 * rep_.floor_us / *us, known_screen(i), c.config);
    else say_.confirm_failed(c.config);
    return us;
  }

  double known_screen(size_t i) const {
    const auto it = screen_us_.find(configs_[i].dump());
    if (it != screen_us_.end()) return it->second;
    const auto k = known_.find(configs_[i].dump());
    return k != known_.end() ? k->second.median_us : 0;
  }

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

  // A compiled candidate's plan, loaded and called once on poisoned output;
  // then, in full, verified and timed (time_launches' defaults), or, as a
  // screen, timed on a few samples without verification. Its time, or
  // nullopt when it failed (stored as such).
  MeasuredUs measure(Candidate& c, bool screen) {
    if (!c.compiled.ok) {
      fail(c, cache::TrialStatus::compile_error, first_lines(c.compiled.log, 6));
      return std::nullopt;
    }
    if (c.compiled.spill_bytes > 0) {
      fail(c, cache::TrialStatus::resource_error,
           "spills " + std::to_string(c.compiled.spill_bytes) + " bytes to local memory");
      return std::nullopt;
    }
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
      return std::nullopt;
    }
    const runtime::PlanGuard guard{p};
    // A plan with a library step (wq_gemm's cublas family) cannot run
    // without the library: a resource error, as a kernel too big for this GPU.
    if (const std::string why = runtime::plan_unavailable(p, stream_); !why.empty()) {
      fail(c, cache::TrialStatus::resource_error, "needs cuBLAS: " + why);
      return std::nullopt;
    }
    // Stored before the GPU runs the candidate, replaced by its result at
    // the end: if the process dies on it (a fault that poisons the context,
    // a hang that gets it killed), the next run finds it measured and skips
    // it instead of dying on it again (--retune tries it anyway).
    {
      cache::TrialRecord pending;
      pending.key = key_;
      pending.config = c.config;
      pending.status = cache::TrialStatus::unfinished;
      pending.message = cache::kUnfinishedTrialMessage;
      store_.put_trials({pending});
    }
    Verification v;
    Timing tm;
    try {
      const CUresult r = call_on_poisoned_output(p, run_, *work_, stream_);
      // (NOT_SUPPORTED: a library step declined the shape, nothing launched.)
      if (r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES || r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
        fail(c, cache::TrialStatus::resource_error, runtime::describe(r));
        return std::nullopt;
      }
      if (r != CUDA_SUCCESS) throw Error("driver", "candidate " + c.config.dump() + " failed: " + runtime::describe(r));
      if (!screen) {
        v = work_->verify();
        if (!v.ok) {
          fail(c, cache::TrialStatus::wrong_result, v.message)->verify_error = v.rel_error;
          say_.wrong(c.config, v.message);
          return std::nullopt;
        }
      }
      const auto launch = [&](int i) {
        const CUresult rr = run_(p, work_->args(i % work_->copies()), stream_);
        if (rr != CUDA_SUCCESS) throw Error("driver", "candidate launch failed: " + runtime::describe(rr));
      };
      tm = screen ? time_launches(launch, stream_, kScreenWarmup, kScreenSamples) : time_launches(launch, stream_);
    } catch (const Error& e) {
      // The context is unusable after most launch failures: record the
      // culprit with the driver's words (stored with the rest), then stop.
      record(c.config, cache::TrialStatus::wrong_result, e.what(), &c.compiled);
      throw;
    }
    auto* t = record(c.config, cache::TrialStatus::ok, "", &c.compiled);
    t->median_us = tm.median_us;
    t->gbps = rep_.bytes / (tm.median_us * 1e3);
    compiled_now_[c.config.dump()] = &c;
    if (screen) {
      t->screened = true;
      t->verify_error = -1;  // not verified (TrialRecord::screened)
      screen_us_[c.config.dump()] = tm.median_us;
      return tm.median_us;
    }
    t->verify_error = v.rel_error;
    ++measured_;
    best_us_ = std::min(best_us_, tm.median_us);
    return tm.median_us;
  }

  const Clock::time_point start_ = Clock::now();
  const codegen::OpSpec& spec_;
  cache::Store& store_;
  const TuneOptions& opt_;
  std::ostream* out_;  // (for shipped_configs' own lines)
  TuneProgress say_;
  const codegen::OpDef& op_;
  const runtime::RunPlan run_;
  const runtime::Device& dev_;
  const cache::Fingerprint fp_;
  const std::string key_;
  TuneReport rep_;
  std::vector<nlohmann::json> configs_, imported_;
  cache::CompileCache compile_cache_;
  const CompileFn compile_;
  std::map<std::string, cache::TrialRecord> known_;  // config -> its stored trial (none with --retune)
  std::deque<Candidate> cands_;                      // a deque: references stay valid as it grows
  std::map<size_t, Candidate*> staged_;              // staged search: config index -> its candidate
  std::map<size_t, double> confirmed_before_;        // staged search: full ok trials of earlier runs
  std::map<std::string, double> screen_us_;          // this run's screen times
  std::unique_ptr<Workload> work_;
  CUstream stream_ = nullptr;
  std::vector<cache::TrialRecord> new_trials_;
  size_t stored_ = 0;  // new_trials_[0, stored_) are in the store
  std::map<std::string, Candidate*> compiled_now_;  // config -> its candidate: the winner need not compile again
  int measured_ = 0, screened_ = 0;
  double best_us_ = INFINITY, best_screen_ = INFINITY, screen_per_candidate_ = 0;
  std::string best_screen_config_;
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
  if (opt.exhaustive) {
    t.compile_all();
    t.prepare_inputs();
    t.measure_all();
  } else {
    t.prepare_inputs();
    t.staged_search();
  }
  t.measure_baselines();
  t.confirm_winner();
  return t.finish();
}

nlohmann::json TuneReport::to_json() const {
  nlohmann::json j;
  j["spec"] = spec_label;
  j["key"] = key;
  j["device"] = device;
  j["device_ordinal"] = device_ordinal;
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
  j["search"] = search;
  j["screened_now"] = screened_now;
  j["compiles"] = compiles;
  j["compiles_reused"] = compiles_reused;
  j["compiles_cached"] = compiles_cached;
  j["families_dropped"] = families_dropped;
  j["wall_s"] = wall_s;
  j["compile_wall_s"] = compile_wall_s;
  j["compile_cpu_s"] = compile_cpu_ms / 1e3;
  j["screen_wall_s"] = screen_wall_s;
  j["confirm_wall_s"] = confirm_wall_s;
  j["baselines"] = nlohmann::json::array();
  for (auto& b : baselines)
    j["baselines"].push_back({{"name", b.name}, {"median_us", b.median_us}, {"rel_error", b.rel_error},
                              {"verified", b.verified}, {"checked", b.checked}, {"speedup", b.median_us / best.median_us}});
  return j;
}

}  // namespace qjit::tuner
