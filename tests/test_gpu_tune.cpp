// GPU tests of the searches and of tuning on several GPUs (run through
// `qjit_tests "[gpu]"`; skipped without a device). What they check is
// bookkeeping, not speed: which trials are screened, which are timed in full
// and verified, that the winner is one of the latter, that a rerun measures
// nothing again, and that workers on several devices (or two on one) lose
// no record.
#include <catch2/catch.hpp>
#include <set>
#include "cache/store.h"
#include "codegen/registry.h"
#include "runtime/device.h"
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"
#include "tuner/multi_device.h"
#include "tuner/tuner.h"

using namespace qjit;
using test::fresh_seed;

namespace {

struct Counts {
  int screened = 0, full_ok = 0, failed = 0, baselines = 0;
};
Counts count(const std::vector<cache::TrialRecord>& trials) {
  Counts c;
  for (const auto& t : trials) {
    if (t.config.contains("baseline")) ++c.baselines;
    else if (t.status != cache::TrialStatus::ok) ++c.failed;
    else if (t.screened) ++c.screened;
    else ++c.full_ok;
    CHECK(t.status != cache::TrialStatus::unfinished);  // every placeholder replaced
  }
  return c;
}

// Fresh random inputs (the seed is printed with a failure), the staged or the exhaustive search.
tuner::TuneOptions options(bool exhaustive) {
  tuner::TuneOptions opt;
  opt.seed = fresh_seed();
  opt.exhaustive = exhaustive;
  return opt;
}

}  // namespace

TEST_CASE("staged search: screened trials stored as such, the winner timed in full and verified", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  // A space above SearchSettings::screen_all_below, so that the search leaves part of it unscreened.
  const auto spec = codegen::parse_spec("wq_gemm", "k=1024,n=512,m=1");
  const tuner::TuneOptions opt = options(false);
  INFO("seed " << opt.seed);
  const auto rep = tuner::tune(spec, store, opt);
  CHECK(rep.search == "staged");
  const Counts c = count(rep.trials);
  CHECK(c.full_ok >= 1);
  CHECK(c.full_ok <= opt.search.max_contenders);
  CHECK(c.screened > 0);
  CHECK(rep.screened_now > 0);
  CHECK(rep.screened_now + rep.failed_now < rep.candidates_total);  // not the whole space
  CHECK(rep.compiles <= rep.screened_now + rep.failed_now + rep.measured_now);
  // The winner's trial is a full one.
  bool winner_full = false;
  for (const auto& t : rep.trials)
    if (t.config == rep.best.config)
      winner_full = t.status == cache::TrialStatus::ok && !t.screened && t.verify_error >= 0;
  CHECK(winner_full);
  CHECK(rep.best.tuned);
  // Screened trials are not verified.
  for (const auto& t : rep.trials)
    if (t.screened) CHECK(t.verify_error == -1);

  SECTION("a rerun does less than the first run and keeps the winner") {
    // Contenders' full times replace their screen times, so a rerun's neighbourhood can reach a few
    // configs the first run did not (on an H200: 24 screened, 1 timed in full, against a first run's
    // hundreds); it never measures a known config again.
    const auto again = tuner::tune(spec, store, opt);
    CHECK(again.measured_now + again.screened_now < rep.measured_now + rep.screened_now);
    CHECK(again.best.config == rep.best.config);
  }
  SECTION("--exhaustive afterwards times in full every candidate, screened ones included") {
    tuner::TuneOptions ex = opt;
    ex.exhaustive = true;
    const auto full = tuner::tune(spec, store, ex);
    CHECK(full.search == "exhaustive");
    const Counts after = count(full.trials);
    CHECK(after.screened == 0);
    CHECK(after.full_ok + after.failed == full.candidates_total);
  }
}

TEST_CASE("exhaustive search: every candidate timed in full and verified, none screened", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  const auto spec = codegen::parse_spec("fp_lut", "n=4097,fn=silu");
  const tuner::TuneOptions opt = options(true);
  INFO("seed " << opt.seed);
  const auto rep = tuner::tune(spec, store, opt);
  const Counts c = count(rep.trials);
  CHECK(c.screened == 0);
  CHECK(c.full_ok + c.failed == rep.candidates_total);
  // fp_lut's blocks_per_sm changes only the launch: its configs share compiles.
  CHECK(rep.compiles_reused > 0);
  // (Some may come from the compile cache an earlier tune of the same sources filled.)
  CHECK(rep.compiles + rep.compiles_cached + rep.compiles_reused == rep.candidates_total);
}

TEST_CASE("tune on several devices (or two workers on one): every spec tuned, nothing lost", "[gpu]") {
  test::TempDir dir;
  const std::string path = dir.file("kernels.db");
  const auto visible = runtime::visible_devices();
  // One worker per device; on a single GPU two workers share it, which still
  // runs two contexts' worth of threads and two connections into one file.
  std::vector<int> devices;
  for (const auto& d : visible)
    if (d.name == visible.front().name) devices.push_back(d.ordinal);
  if (devices.size() == 1) devices.push_back(devices.front());
  std::vector<codegen::OpSpec> specs;
  for (const char* s : {"n=4097,fn=silu", "n=4097,fn=gelu", "n=8191,fn=exp", "n=4096,fn=tanh"})
    specs.push_back(codegen::parse_spec("fp_lut", s));
  const tuner::TuneOptions opt = options(false);
  INFO("seed " << opt.seed);
  const auto reports = tuner::tune_on_devices(specs, {}, opt, devices, path, nullptr);
  REQUIRE(reports.size() == specs.size());
  std::set<int> used;
  cache::Store store(path);
  for (size_t i = 0; i < specs.size(); ++i) {
    INFO(specs[i].label());
    CHECK(reports[i].spec_label == specs[i].label());
    used.insert(reports[i].device_ordinal);
    const auto rec = store.lookup(reports[i].key);
    REQUIRE(rec.has_value());
    CHECK(rec->config == reports[i].best.config);
    // Every trial the worker saw is in the file.
    CHECK(store.trials(reports[i].key).size() == reports[i].trials.size());
  }
  if (visible.size() > 1) CHECK(used.size() > 1);
  // A failure in one worker stops the run with its error (a spec whose only
  // config is illegal: nothing can win).
  std::vector<std::vector<nlohmann::json>> only(specs.size());
  only[1] = {nlohmann::json{{"no_such_key", 1}}};
  CHECK_THROWS_WITH(tuner::tune_on_devices(specs, only, opt, devices, dir.file("failing.db"), nullptr),
                    Catch::Contains("no candidate of " + specs[1].label()));
}
