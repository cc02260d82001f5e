#pragma once
// The tuner's progress lines (TuneOptions::progress, stderr from the CLI;
// none with -q and never in --json): one method per event of a tuning run,
// so that tuner/tuner.cpp reads as the driver and the wording lives here.
// Every method prints nothing when the stream is null. The lines are
// described in docs/tuning.md ("Progress").
#include <cstddef>
#include <ostream>
#include <string>
#include <nlohmann/json.hpp>

namespace qjit::tuner {

// "~12 s left", "~3 min left"; "" for a negative or unknown time.
std::string time_left(double seconds);

class TuneProgress {
 public:
  explicit TuneProgress(std::ostream* out) : out_(out) {}
  bool on() const { return out_ != nullptr; }

  void note(const std::string& what);
  void bandwidth_start(const std::string& device);
  void bandwidth_done(double gbps);
  void preparing_inputs();
  void inputs_ready(int weight_copies);
  // An imported or shipped config that is illegal for this spec.
  void skipping(const nlohmann::json& config, const std::string& why);

  // The header line of each search: the spec, the device and what is known.
  void exhaustive_start(const std::string& spec, const std::string& device, const std::string& arch, int candidates,
                        int known, size_t to_run);
  void staged_start(const std::string& spec, const std::string& device, const std::string& arch, uint64_t seed,
                    int candidates, int known);

  // The exhaustive search: compiles (one line redrawn), then each candidate's time.
  void compiling(size_t candidates, int threads);
  void compiled(size_t done, size_t total, double seconds_left);
  void compiles_done();
  void measuring();
  void measured(int measured, size_t total, double us, double gbps, double floor_pct, double best_us,
                double seconds_left, const nlohmann::json& config);

  // The staged search: each batch screened, what is left, the contenders.
  void batch_start(const std::string& stage, size_t candidates, size_t screened_before);
  void batch_done(const std::string& stage, size_t results, double seconds, double compile_wait, double best_us,
                  bool improved, const std::string& best_config);
  void remaining(size_t to_screen, int contenders, double seconds_left);
  void family_dropped(const std::string& why);
  void confirmed_before(const nlohmann::json& config, double us);
  void confirmed(double us, double floor_pct, double screen_us, const nlohmann::json& config);
  void confirm_failed(const nlohmann::json& config);

  // Either search: a candidate whose output failed verification.
  void wrong(const nlohmann::json& config, const std::string& why);

  // The library baselines of the workload.
  void no_baseline(const std::string& why);
  void baseline(const std::string& name, double us, double gbps, double floor_pct);

  // The winner's repeated launches, and a baseline faster than it.
  void verifying_winner(int launches);
  void winner_verified();
  void winner_wrong(const std::string& why);
  void baseline_faster(const std::string& name, double baseline_us, double best_us, const std::string& spec);

 private:
  std::ostream* out_;
};

}  // namespace qjit::tuner
