// The autotuner (DESIGN.md "Tuning rules"): candidates from the op's tunable
// space, statically pruned (compile report: spills) → compiled in parallel →
// loaded → verified against the CPU reference on fresh random inputs → timed
// with CUDA events on weights rotated beyond L2 → every trial stored; the
// fastest verified candidate (ties within noise → the simpler config),
// verified again on kWinnerLaunches more launches, becomes the cached
// kernel. Library baselines are measured in the same run.
//
// Two searches pick the candidates (docs/tuning.md). The staged search (the
// default) compiles and screens a part of the space chosen by
// tuner/search.h (a few launches each, not verified; stored as screened
// trials), then times in full and verifies the best few; only those can
// win. The exhaustive search compiles, verifies and times every candidate.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "cache/compile_cache.h"
#include "cache/store.h"
#include "codegen/spec.h"
#include "tuner/search.h"

namespace qjit::tuner {

struct TuneOptions {
  double budget_seconds = 0;   // stop starting new work after this long (0: no limit)
  int budget_candidates = 0;   // measure at most this many new candidates (0: all)
  bool retune = false;         // measure again candidates that already have trials
  int compile_threads = 0;     // 0: one per core
  uint64_t seed = 0;           // 0: fresh random inputs
  std::ostream* progress = nullptr;  // human-readable progress (stderr in the CLI)
  // When non-empty: measure only these configs (e.g. imported ones), not the space.
  std::vector<nlohmann::json> only_configs;
  // Every candidate compiled, verified and timed in full, instead of the staged search.
  bool exhaustive = false;
  // The staged search's settings; search.seed makes its choices repeatable.
  SearchSettings search;
  // The staged search starts from the winners (and runners-up) cached for
  // the nearest values of the spec's m with every other key equal.
  bool seed_from_neighbours = true;
  // ... and from the config shipped for the spec on this GPU (tuner/shipped.h), if any.
  bool seed_from_shipped = true;
  // Time the op's library baselines (cuBLAS, ...) after the search; off for
  // `qjit import`, which only checks and times the configs it brings.
  bool baselines = true;
  // The compile cache file shared across runs (cache/compile_cache.h; "": none).
  std::string compile_cache = cache::CompileCache::default_path();
};

// The configs of `space` holding every key of `filter` with its value (a key
// a config lacks does not match); `qjit tune --only`. Throws Error naming the
// filter when it is not a JSON object or matches none.
std::vector<nlohmann::json> select_configs(const std::vector<nlohmann::json>& space, const nlohmann::json& filter);

struct BaselineResult {
  std::string name;
  double median_us = 0;
  double rel_error = 0;
  bool verified = false;
  bool checked = true;  // false: timed only (Baseline::checked), rel_error NaN
};

struct TuneReport {
  std::string spec_label, key, device, arch;
  int device_ordinal = 0;
  cache::KernelRecord best;            // without blobs needed by callers
  std::vector<cache::TrialRecord> trials;  // every trial for the key, leaderboard order
  std::vector<BaselineResult> baselines;
  std::string search;                  // "staged" or "exhaustive"
  // measured_now: timed in full and verified in this run; screened_now:
  // screened only (staged search); compiles: distinct sources compiled by
  // NVRTC now, compiles_reused: candidates that shared one of them,
  // compiles_cached: sources the compile cache had from an earlier run.
  int candidates_total = 0, measured_now = 0, screened_now = 0, skipped_known = 0, failed_now = 0;
  int compiles = 0, compiles_reused = 0, compiles_cached = 0;
  std::vector<std::string> families_dropped;  // by the staged search, with why
  // compile_wall_s: the exhaustive search's compile step, or the staged
  // search's time waiting on compiles; screen_wall_s, confirm_wall_s: the
  // staged search's screen (compiles included) and full timing of its contenders.
  double wall_s = 0, compile_wall_s = 0, compile_cpu_ms = 0, screen_wall_s = 0, confirm_wall_s = 0;
  double copy_gbps = 0, bytes = 0, floor_us = 0;
  nlohmann::json to_json() const;
};

TuneReport tune(const codegen::OpSpec& spec, cache::Store& store, const TuneOptions& options);


// How complex a config is, for tie-breaking: the product of its integer values.
double config_complexity(const nlohmann::json& config);

// The winner among a key's trials: the fastest ok trial that is not a
// baseline and was timed in full and verified (not only screened), except
// that any such within 1% of it (the noise) that is simpler
// (config_complexity, then the config's text) wins instead. Null when no
// such trial is left.
const cache::TrialRecord* choose_winner(const std::vector<cache::TrialRecord>& trials);

// Launches of the winner, each verified, before it is cached: a race that
// shows once in 8 launches slips past one verification 7 times in 8, but
// past 16 more only 12% of the time. (Such a race existed in the wgmma
// producer's arrival: 1 to 7 of 8 single verifications per config failed;
// docs/wq_gemm_wgmma.md.)
inline constexpr int kWinnerLaunches = 16;

}  // namespace qjit::tuner
