// Helpers of the GPU test files: see gpu_helpers.h.
#include "tests/gpu_helpers.h"
#include <catch2/catch.hpp>
#include <algorithm>
#include <random>

namespace qjit::test {

uint64_t fresh_seed() { return (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); }

DType wq_type(const std::string& s) { return s == "fp16" ? DType::fp16 : s == "bf16" ? DType::bf16 : DType::fp32; }

tuner::TuneReport expect_every_candidate_verifies(cache::Store& store, const codegen::OpSpec& spec, bool allow_pruned,
                                                  int budget_candidates, int max_pruned_percent) {
  tuner::TuneOptions opt;
  opt.seed = fresh_seed();
  opt.budget_candidates = budget_candidates;
  opt.exhaustive = true;
  INFO(spec.label() << " seed " << opt.seed);
  auto rep = tuner::tune(spec, store, opt);
  int candidates = 0, pruned = 0;
  for (auto& t : rep.trials) {
    INFO(t.config.dump() << " " << cache::to_string(t.status) << " " << t.message);
    const bool is_pruned = allow_pruned && t.status == cache::TrialStatus::resource_error &&
                           t.message.find("spills") != std::string::npos;
    CHECK((t.status == cache::TrialStatus::ok || is_pruned));
    pruned += is_pruned;
    candidates += !t.config.contains("baseline");
  }
  if (budget_candidates == 0) CHECK(candidates == rep.candidates_total);
  CHECK(pruned * 100 < max_pruned_percent * std::max(candidates, 1));
  return rep;
}

void tune_one_config(const std::string& db, const codegen::OpSpec& spec, const nlohmann::json& config) {
  cache::Store store(db);
  set_cache_path(db);
  tuner::TuneOptions opt;
  opt.seed = fresh_seed();
  opt.only_configs = {config};
  const auto rep = tuner::tune(spec, store, opt);
  INFO(spec.label() << " " << config.dump() << " seed " << opt.seed);
  REQUIRE(rep.best.config == config);
}

}  // namespace qjit::test
