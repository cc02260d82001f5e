// The staged search (the default of `qjit tune`; docs/tuning.md): which
// candidates of an op's space to compile and screen, and which to time in
// full and verify. Pure: it sees configs (JSON objects) and the times the
// caller measured for them, never a GPU or the store, so the same code runs
// under the tuner and under tests with a synthetic cost surface.
//
//   sample      per family (the config's "family" value), the seeds and a
//               spread of the family's configs, each screened (few launches,
//               no verification);
//   prune       a family whose best screen time is family_cutoff × the best
//               is explored no further;
//   neighbours  rounds of the unscreened configs one key away (same family
//               or not) from the best few (the parents), until none is left;
//               then a round of configs two keys away from them, and again
//               one-key rounds while that changes the parents;
//   confirm     the best screened configs, in screen order, timed in full and
//               verified by the caller, until enough passed.
//
// Given the same space, seeds, settings and measured times, the batches,
// and so the result, are the same: the only randomness is the sample's
// tie-breaking, drawn from settings.seed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

namespace qjit::tuner {

struct SearchSettings {
  uint64_t seed = 1;
  // The first sample of each family: sample_fraction of it, at least
  // sample_min (or the whole family when smaller), seeds included.
  double sample_fraction = 0.04;
  int sample_min = 4;
  // A space this small is screened whole (the saving is then in launches
  // and verification, not compiles).
  int screen_all_below = 100;
  // A family whose best screen time exceeds family_cutoff × the best of all
  // (or that has sample_min failures and no success) is not explored further.
  double family_cutoff = 2.0;
  // Each neighbour round expands the `parents` best screened configs, and
  // the best of each live family within family_within × the best.
  int parents = 3;
  double family_within = 1.15;
  // A two-key round takes at most this many configs.
  int wide_max = 24;
  // Screen at most this many configs, those recorded before the search
  // included (0: no limit).
  int max_screened = 0;
  // After the screen: at least `contenders` configs confirmed ok, plus every
  // config whose screen time is within contender_within of the best screen
  // time, up to max_contenders confirmed ok.
  int contenders = 4;
  double contender_within = 0.03;
  int max_contenders = 8;
};

// A screen or full time in µs; nullopt: the candidate failed (did not
// compile, did not launch, or, when confirmed, gave a wrong result).
using MeasuredUs = std::optional<double>;

class StagedSearch {
 public:
  StagedSearch(std::vector<nlohmann::json> space, const std::vector<nlohmann::json>& seeds, SearchSettings settings);

  // The configs to screen next (indices into space()); empty once the screen
  // is over. Each batch's results must be recorded before the next call.
  std::vector<size_t> next_batch();
  // A screen result, for a config of the last batch or one already measured
  // before the search (then it is never handed out).
  void record(size_t index, MeasuredUs us);
  // A config of the last batch left unscreened (the caller's budget ran out).
  void abandon(size_t index);
  // Ends the screen now (a time or candidate budget ran out).
  void stop_screening() { stopped_ = true; }

  // After the screen: the next config to time in full and verify, in
  // screen order, or nullopt when enough are confirmed (or none is left).
  std::optional<size_t> next_contender();
  void confirmed(size_t index, MeasuredUs us);

  const std::vector<nlohmann::json>& space() const { return space_; }
  const std::string& stage() const { return stage_; }
  size_t screened() const { return screened_count_; }
  // A rough count of configs still to screen: the current round's rest and
  // one more round like it (the search cannot know how many rounds remain).
  size_t expected_left() const;
  // The families dropped so far, with why.
  const std::vector<std::string>& dropped() const { return dropped_why_; }
  const std::string& family_of(size_t index) const { return family_name_[family_[index]]; }
  // Screen time of a config, if screened and ok.
  MeasuredUs screen_us(size_t index) const;
  // The configs confirmed ok, best first.
  std::vector<size_t> confirmed_ok() const;

 private:
  int distance(size_t a, size_t b) const;
  std::vector<size_t> sample();
  std::vector<size_t> neighbours(size_t of, int dist) const;
  std::vector<size_t> ranked(bool live_only) const;  // screened ok configs, fastest first
  void update_families();
  std::vector<size_t> parents() const;
  bool screen_allowed(size_t index) const;
  std::vector<size_t> cap(std::vector<size_t> batch) const;

  std::vector<nlohmann::json> space_;
  SearchSettings set_;
  std::vector<std::vector<int>> coord_;  // per config, per key: the index of its value (0: key absent)
  std::vector<int> family_;              // per config: index into family_name_
  std::vector<std::string> family_name_;
  std::vector<bool> family_dead_;
  std::vector<size_t> seeds_;
  std::vector<MeasuredUs> screen_;
  std::vector<bool> screened_, handed_;
  size_t screened_count_ = 0;
  enum class Phase { sample, neighbours, wide, confirm } phase_ = Phase::sample;
  std::vector<size_t> wide_from_;  // the parents when the two-key round was handed out
  bool wide_done_ = false;
  int round_ = 0;
  size_t pending_ = 0;        // handed out, not recorded
  size_t last_batch_ = 0;
  bool stopped_ = false;
  std::string stage_ = "screen: sample";
  std::vector<std::string> dropped_why_;
  std::vector<size_t> contender_order_;
  bool contenders_ranked_ = false;
  size_t next_contender_ = 0;
  std::vector<std::pair<size_t, double>> confirmed_ok_;
};

// The caller's side of a staged search: screening a batch (compile, few
// launches: a result for each config screened, in any order; a config left
// out stays unscreened and ends the screen, as when a budget runs out in the
// batch), confirming a contender (full timing and verification), an
// optional stop check before each batch, and an optional progress report
// after each step.
using ScreenResults = std::vector<std::pair<size_t, MeasuredUs>>;
struct SearchHooks {
  std::function<ScreenResults(const std::vector<size_t>&)> screen;
  std::function<MeasuredUs(size_t)> confirm;
  std::function<bool()> stop;
  std::function<void(const StagedSearch&)> progress;
};

// Runs the search to its end: the configs confirmed ok, best first.
std::vector<size_t> run_staged_search(StagedSearch& search, const SearchHooks& hooks);

}  // namespace qjit::tuner
