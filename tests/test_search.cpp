// The staged search (tuner/search.h) on synthetic spaces and cost surfaces
// whose exhaustive winner is known: it finds that winner or one within 2%,
// drops families that lose by 2x at the screen, confirms (times in full and
// verifies) every config it returns, and repeats itself for a seed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuner/search.h"

using json = nlohmann::json;
using qjit::tuner::MeasuredUs;
using qjit::tuner::SearchHooks;
using qjit::tuner::SearchSettings;
using qjit::tuner::StagedSearch;

namespace {

// A space shaped like a kernel op's: a large family of five keys, one key
// present only on some configs (absent means off, as the ops write them) and
// legal only with some values of another (a constraint that one-key steps
// cannot cross), a small family that loses by 2.5x, and a third family of
// three keys that comes within 20%.
std::vector<json> synthetic_space() {
  std::vector<json> out;
  for (int warps : {1, 2, 4, 8})
    for (int split : {1, 2, 4, 8, 16})
      for (int unroll : {1, 2, 3, 4})
        for (int stages : {0, 2, 3, 4})
          for (int pair : {0, 1}) {
            if (stages == 0 && unroll > 2) continue;
            if (pair && stages != 2 && stages != 3) continue;  // pair twins have 2 or 3 slots only
            json c = {{"warps", warps}, {"split_k", split}, {"unroll", unroll}, {"stages", stages}};
            if (pair) c["pair"] = 1;
            out.push_back(c);
          }
  for (int tiles : {1, 2, 4, 8})
    for (int warps : {4, 8}) out.push_back({{"family", "library"}, {"tiles", tiles}, {"warps", warps}});
  for (int rows : {64, 128, 256})
    for (int stream : {0, 1, 2, 3})
      for (int chunks : {1, 2})
        out.push_back({{"family", "wide"}, {"rows", rows}, {"stream", stream}, {"chunks", chunks}});
  return out;
}

// Deterministic per-config roughness in [-amp, amp].
double rough(const json& c, double amp) {
  const size_t h = std::hash<std::string>{}(c.dump());
  return amp * (static_cast<double>(h % 2001) / 1000.0 - 1.0);
}

// A bowl in the large family's keys with interactions, best at warps 4, split
// 8, unroll 3, 2 slots with pair (reachable from the plain rings only by
// changing two keys); the library family 2.5x slower; the wide family ~1.2x.
double cost(const json& c) {
  const std::string fam = c.value("family", "");
  if (fam == "library") return 25.0 + c["tiles"].get<int>() * 0.1 + c["warps"].get<int>() * 0.01;
  if (fam == "wide")
    return 12.0 + std::abs(c["rows"].get<int>() - 128) * 0.01 + std::abs(c["stream"].get<int>() - 2) * 0.3 +
           (c["chunks"].get<int>() == 2 ? -0.1 : 0.0);
  const double w = std::log2(c["warps"].get<int>()) - 2, s = std::log2(c["split_k"].get<int>()) - 3,
               u = c["unroll"].get<int>() - 3.0;
  const int stages = c["stages"].get<int>();
  const bool pair = c.value("pair", 0) == 1;
  double v = 10.0 * (1 + 0.08 * w * w + 0.05 * s * s + 0.03 * u * u + 0.02 * w * u + (stages == 0 ? 0.06 : 0.0) +
                     (stages == 4 ? 0.01 : 0.0) + (pair ? (stages == 2 ? -0.05 : -0.02) : 0.0));
  return v * (1 + rough(c, 0.004));
}

struct Run {
  std::vector<std::vector<size_t>> batches;
  std::vector<size_t> confirmed_calls, result;
  std::set<size_t> screened;
};

// Runs the search with screen times = cost × (1 ± 1.5% noise drawn from the
// config and `noise_seed`), full times = cost; configs in `wrong` fail
// their verification.
Run run(StagedSearch& s, uint64_t noise_seed = 7, const std::set<std::string>& wrong = {}) {
  Run r;
  SearchHooks h;
  h.screen = [&](const std::vector<size_t>& batch) {
    r.batches.push_back(batch);
    qjit::tuner::ScreenResults out;
    // Answered in reverse, as a compile pool finishes them in any order.
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
      r.screened.insert(*it);
      const json& c = s.space()[*it];
      const size_t hh = std::hash<std::string>{}(c.dump() + std::to_string(noise_seed));
      out.push_back({*it, cost(c) * (1 + 0.015 * (static_cast<double>(hh % 2001) / 1000.0 - 1.0))});
    }
    return out;
  };
  h.confirm = [&](size_t i) -> MeasuredUs {
    r.confirmed_calls.push_back(i);
    if (wrong.count(s.space()[i].dump())) return std::nullopt;
    return cost(s.space()[i]);
  };
  r.result = qjit::tuner::run_staged_search(s, h);
  return r;
}

double exhaustive_best(const std::vector<json>& space) {
  double best = INFINITY;
  for (const auto& c : space) best = std::min(best, cost(c));
  return best;
}

}  // namespace

TEST_CASE("staged search: finds the exhaustive winner within 2% screening a fraction of the space", "[tuner]") {
  const auto space = synthetic_space();
  const double best = exhaustive_best(space);
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    for (uint64_t noise : {7, 8}) {
      INFO("seed " << seed << ", noise " << noise);
      SearchSettings set;
      set.seed = seed;
      StagedSearch s(space, {}, set);
      const Run r = run(s, noise);
      REQUIRE(!r.result.empty());
      CHECK(cost(space[r.result.front()]) <= best * 1.02);
      CHECK(r.screened.size() < space.size() / 2);
      // Nothing was screened twice.
      size_t handed = 0;
      for (const auto& b : r.batches) handed += b.size();
      CHECK(handed == r.screened.size());
    }
  }
}

TEST_CASE("staged search: a family that loses by 2x at the screen is not explored further", "[tuner]") {
  const auto space = synthetic_space();
  SearchSettings set;
  StagedSearch s(space, {}, set);
  const Run r = run(s);
  size_t library_screened = 0, library_size = 0;
  for (size_t i = 0; i < space.size(); ++i)
    if (space[i].value("family", "") == "library") {
      ++library_size;
      library_screened += r.screened.count(i);
    }
  // Only the first sample's share of it (4 of 8 configs).
  CHECK(library_screened == static_cast<size_t>(set.sample_min));
  CHECK(library_screened < library_size);
  REQUIRE(s.dropped().size() == 1);
  CHECK_THAT(s.dropped()[0], Catch::Contains("library"));
  // No config of it was confirmed.
  for (size_t i : r.confirmed_calls) CHECK(space[i].value("family", "") != "library");
}

TEST_CASE("staged search: every config returned was confirmed ok; wrong ones are passed over", "[tuner]") {
  const auto space = synthetic_space();
  // The three best configs of the surface give wrong results.
  std::vector<std::pair<double, std::string>> by_cost;
  for (const auto& c : space) by_cost.push_back({cost(c), c.dump()});
  std::sort(by_cost.begin(), by_cost.end());
  const std::set<std::string> wrong = {by_cost[0].second, by_cost[1].second, by_cost[2].second};
  SearchSettings set;
  StagedSearch s(space, {}, set);
  const Run r = run(s, 7, wrong);
  REQUIRE(r.result.size() >= static_cast<size_t>(set.contenders));
  const std::set<size_t> confirmed(r.confirmed_calls.begin(), r.confirmed_calls.end());
  for (size_t i : r.result) {
    CHECK(confirmed.count(i) == 1);
    CHECK(wrong.count(space[i].dump()) == 0);
  }
  // The best that is right, within 2%.
  CHECK(cost(space[r.result.front()]) <= by_cost[3].first * 1.02);
  // Results are best first, by their full times.
  for (size_t j = 1; j < r.result.size(); ++j) CHECK(cost(space[r.result[j - 1]]) <= cost(space[r.result[j]]));
  // Contenders come in screen order, and only screened ones.
  for (size_t i : r.confirmed_calls) CHECK(r.screened.count(i) == 1);
}

TEST_CASE("staged search: the same seed and times give the same batches; seeds are screened first", "[tuner]") {
  const auto space = synthetic_space();
  SearchSettings set;
  set.seed = 11;
  StagedSearch a(space, {}, set), b(space, {}, set);
  const Run ra = run(a), rb = run(b);
  CHECK(ra.batches == rb.batches);
  CHECK(ra.result == rb.result);
  set.seed = 12;
  StagedSearch c(space, {}, set);
  CHECK(run(c).batches.front() != ra.batches.front());

  // A seed (e.g. the neighbour bucket's winner) is in the first batch; one not in the space is ignored.
  const json seed = {{"warps", 2}, {"split_k", 4}, {"unroll", 2}, {"stages", 3}, {"pair", 1}};
  StagedSearch d(space, {seed, json{{"warps", 3}}}, set);
  const Run rd = run(d);
  bool found = false;
  for (size_t i : rd.batches.front()) found = found || space[i] == seed;
  CHECK(found);
}

TEST_CASE("staged search: results known before the search are used, not screened again", "[tuner]") {
  const auto space = synthetic_space();
  StagedSearch s(space, {}, SearchSettings{});
  // Half the large family measured by an earlier run.
  std::set<size_t> known;
  for (size_t i = 0; i < space.size(); i += 2)
    if (!space[i].contains("family")) {
      s.record(i, cost(space[i]));
      known.insert(i);
    }
  const Run r = run(s);
  for (size_t i : known) CHECK(r.screened.count(i) == 0);
  REQUIRE(!r.result.empty());
  CHECK(cost(space[r.result.front()]) <= exhaustive_best(space) * 1.02);
}

TEST_CASE("staged search: a screen cap, a stop, a small space, a failed family", "[tuner]") {
  const auto space = synthetic_space();
  SECTION("max_screened caps the screen; contenders are still confirmed") {
    SearchSettings set;
    set.max_screened = 30;
    StagedSearch s(space, {}, set);
    const Run r = run(s);
    CHECK(r.screened.size() == 30);
    CHECK(r.result.size() >= static_cast<size_t>(set.contenders));
  }
  SECTION("a stop before the first batch still confirms one contender measured earlier") {
    StagedSearch s(space, {}, SearchSettings{});
    s.record(5, cost(space[5]));
    s.record(9, cost(space[9]));
    SearchHooks h;
    int confirms = 0;
    h.screen = [](const std::vector<size_t>&) -> qjit::tuner::ScreenResults {
      FAIL("screened after a stop");
      return {};
    };
    h.confirm = [&](size_t i) -> MeasuredUs {
      ++confirms;
      return cost(space[i]);
    };
    h.stop = [] { return true; };
    const auto result = qjit::tuner::run_staged_search(s, h);
    CHECK(confirms == 1);
    CHECK(result.size() == 1);
  }
  SECTION("a screen cut short in a batch leaves the rest unscreened and ends the screen") {
    StagedSearch s(space, {}, SearchSettings{});
    SearchHooks h;
    int batches = 0;
    h.screen = [&](const std::vector<size_t>& batch) {
      ++batches;
      qjit::tuner::ScreenResults out;
      for (size_t j = 0; j < batch.size(); j += 2) out.push_back({batch[j], cost(space[batch[j]])});
      return out;
    };
    h.confirm = [&](size_t i) -> MeasuredUs { return cost(space[i]); };
    const auto result = qjit::tuner::run_staged_search(s, h);
    CHECK(batches == 1);
    CHECK(!result.empty());
    CHECK(s.expected_left() == 0);
  }
  SECTION("a space below screen_all_below is screened whole in the first batch") {
    std::vector<json> small(space.end() - 32, space.end());
    StagedSearch s(small, {}, SearchSettings{});
    const Run r = run(s);
    REQUIRE(!r.batches.empty());
    CHECK(r.batches.front().size() == small.size());
  }
  SECTION("a family none of whose sampled configs ran is dropped") {
    StagedSearch s(space, {}, SearchSettings{});
    SearchHooks h;
    std::set<size_t> wide_screened;
    h.screen = [&](const std::vector<size_t>& batch) {
      qjit::tuner::ScreenResults out;
      for (size_t i : batch) {
        const bool wide = space[i].value("family", "") == "wide";
        if (wide) wide_screened.insert(i);
        out.push_back({i, wide ? MeasuredUs{} : MeasuredUs{cost(space[i])}});
      }
      return out;
    };
    h.confirm = [&](size_t i) -> MeasuredUs { return cost(space[i]); };
    qjit::tuner::run_staged_search(s, h);
    CHECK(wide_screened.size() == static_cast<size_t>(SearchSettings{}.sample_min));
    bool named = false;
    for (const auto& why : s.dropped()) named = named || why.find("wide: none of its") != std::string::npos;
    CHECK(named);
  }
}
