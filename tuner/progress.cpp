#include "tuner/progress.h"
#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qjit::tuner {

std::string time_left(double s) {
  char b[48];
  if (!std::isfinite(s) || s < 0) return "";
  if (s < 90) std::snprintf(b, sizeof b, "~%.0f s left", std::max(1.0, s));
  else std::snprintf(b, sizeof b, "~%.1f min left", s / 60);
  return b;
}

void TuneProgress::note(const std::string& what) {
  if (out_) *out_ << "note: " << what << "\n";
}

void TuneProgress::bandwidth_start(const std::string& device) {
  if (out_) *out_ << "measuring copy bandwidth of " << device << " ... " << std::flush;
}

void TuneProgress::bandwidth_done(double gbps) {
  if (out_) *out_ << static_cast<int>(gbps) << " GB/s\n";
}

void TuneProgress::preparing_inputs() {
  if (out_) *out_ << "preparing inputs and the CPU reference ... " << std::flush;
}

void TuneProgress::inputs_ready(int weight_copies) {
  if (out_) *out_ << weight_copies << " weight copies rotated\n";
}

void TuneProgress::skipping(const nlohmann::json& config, const std::string& why) {
  if (out_) *out_ << "  skipping config " << config.dump() << ": " << why << "\n";
}

void TuneProgress::exhaustive_start(const std::string& spec, const std::string& device, const std::string& arch,
                                    int candidates, int known, size_t to_run) {
  if (out_)
    *out_ << "tuning " << spec << " on " << device << " (" << arch << "), exhaustive search: " << candidates
          << " candidates, " << known << " already measured, " << to_run << " to run\n";
}

void TuneProgress::staged_start(const std::string& spec, const std::string& device, const std::string& arch,
                                uint64_t seed, int candidates, int known) {
  if (out_)
    *out_ << "tuning " << spec << " on " << device << " (" << arch << "), staged search (seed " << seed
          << "): " << candidates << " candidates, " << known << " already measured\n";
}

void TuneProgress::compiling(size_t candidates, int threads) {
  if (out_) *out_ << "compiling " << candidates << " candidates on " << threads << " threads\n";
}

void TuneProgress::compiled(size_t done, size_t total, double seconds_left) {
  // Every 16th and the last: a line redrawn in place.
  if (out_ && (done % 16 == 0 || done == total))
    *out_ << "\r  compile: " << done << "/" << total << " " << time_left(seconds_left) << "   " << std::flush;
}

void TuneProgress::compiles_done() {
  if (out_) *out_ << "\n";
}

void TuneProgress::measuring() {
  if (out_) *out_ << "measure: each candidate verified, then timed\n";
}

void TuneProgress::measured(int measured, size_t total, double us, double gbps, double floor_pct, double best_us,
                            double seconds_left, const nlohmann::json& config) {
  if (!out_) return;
  char line[256];
  std::snprintf(line, sizeof line, "  [%3d/%zu] %8.2f us %7.0f GB/s %5.1f%% of floor  best %.2f us  %s  %s\n", measured,
                total, us, gbps, floor_pct, best_us, time_left(seconds_left).c_str(), config.dump().c_str());
  *out_ << line;
}

void TuneProgress::batch_start(const std::string& stage, size_t candidates, size_t screened_before) {
  if (out_) *out_ << "  " << stage << ": " << candidates << " candidates (" << screened_before << " screened so far)\n";
}

void TuneProgress::batch_done(const std::string& stage, size_t results, double seconds, double compile_wait,
                              double best_us, bool improved, const std::string& best_config) {
  if (!out_) return;
  char line[512];
  std::snprintf(line, sizeof line, "  %s: %zu screened in %.1f s (waiting on compiles %.1f s); best %.2f us%s %s\n",
                stage.c_str(), results, seconds, compile_wait, best_us, improved ? " (new)" : "", best_config.c_str());
  *out_ << line;
}

void TuneProgress::remaining(size_t to_screen, int contenders, double seconds_left) {
  if (out_)
    *out_ << "  ~" << to_screen << " more to screen, " << contenders << "+ to confirm; " << time_left(seconds_left)
          << "\n";
}

void TuneProgress::family_dropped(const std::string& why) {
  if (out_) *out_ << "  family dropped: " << why << "\n";
}

void TuneProgress::confirmed_before(const nlohmann::json& config, double us) {
  if (out_) *out_ << "  confirm: " << config.dump() << " measured before: " << us << " us\n";
}

void TuneProgress::confirmed(double us, double floor_pct, double screen_us, const nlohmann::json& config) {
  if (!out_) return;
  char line[512];
  std::snprintf(line, sizeof line, "  confirm: %8.2f us %5.1f%% of floor, verified (screen %.2f us)  %s\n", us,
                floor_pct, screen_us, config.dump().c_str());
  *out_ << line;
}

void TuneProgress::confirm_failed(const nlohmann::json& config) {
  if (out_) *out_ << "  confirm: failed  " << config.dump() << "\n";
}

void TuneProgress::wrong(const nlohmann::json& config, const std::string& why) {
  if (out_) *out_ << "  WRONG " << config.dump() << ": " << why << "\n";
}

void TuneProgress::no_baseline(const std::string& why) {
  if (out_) *out_ << "no library baseline: " << why << "\n";
}

void TuneProgress::baseline(const std::string& name, double us, double gbps, double floor_pct) {
  if (!out_) return;
  char line[256];
  std::snprintf(line, sizeof line, "  baseline %-22s %8.2f us %7.0f GB/s %5.1f%% of floor\n", name.c_str(), us, gbps,
                floor_pct);
  *out_ << line;
}

void TuneProgress::verifying_winner(int launches) {
  if (out_) *out_ << "verify: the winner on " << launches << " more launches ... " << std::flush;
}

void TuneProgress::winner_verified() {
  if (out_) *out_ << "ok\n";
}

void TuneProgress::winner_wrong(const std::string& why) {
  if (out_) *out_ << "WRONG: " << why << "\n";
}

void TuneProgress::baseline_faster(const std::string& name, double baseline_us, double best_us, const std::string& spec) {
  if (out_)
    *out_ << "WARNING: baseline " << name << " (" << baseline_us << " us) is faster than the best qjit plan (" << best_us
          << " us) for " << spec << "\n";
}

}  // namespace qjit::tuner
