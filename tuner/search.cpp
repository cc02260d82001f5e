#include "tuner/search.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include "codegen/error.h"

namespace qjit::tuner {
namespace {

// splitmix64 of a value: the sample's tie-breaking ranks, the same on every
// platform (std:: distributions are not).
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string coord_key(const std::vector<int>& c) {
  std::string k;
  for (int v : c) k += std::to_string(v) + ",";
  return k;
}

}  // namespace

StagedSearch::StagedSearch(std::vector<nlohmann::json> space, const std::vector<nlohmann::json>& seeds,
                           SearchSettings settings)
    : space_(std::move(space)), set_(settings) {
  // Coordinates: every key any config has, each value numbered (0: the key is absent).
  std::map<std::string, std::map<std::string, int>> values;
  for (const auto& c : space_)
    if (c.is_object())
      for (const auto& [k, v] : c.items()) values[k].emplace(v.dump(), 0);
  for (auto& [k, vs] : values) {
    int n = 0;
    for (auto& [v, id] : vs) id = ++n;
  }
  std::map<std::string, int> family_ids;
  std::unordered_map<std::string, size_t> by_dump;
  for (size_t i = 0; i < space_.size(); ++i) {
    const auto& c = space_[i];
    std::vector<int> coord;
    for (const auto& [k, vs] : values)
      coord.push_back(c.is_object() && c.contains(k) ? vs.at(c.at(k).dump()) : 0);
    coord_.push_back(std::move(coord));
    const std::string fam = c.is_object() && c.contains("family") && c["family"].is_string()
                                ? c["family"].get<std::string>()
                                : "";
    auto [it, fresh] = family_ids.emplace(fam, static_cast<int>(family_name_.size()));
    if (fresh) family_name_.push_back(fam);
    family_.push_back(it->second);
    by_dump.emplace(c.dump(), i);
  }
  family_dead_.assign(family_name_.size(), false);
  for (const auto& s : seeds)
    if (auto it = by_dump.find(s.dump()); it != by_dump.end() &&
                                          std::find(seeds_.begin(), seeds_.end(), it->second) == seeds_.end())
      seeds_.push_back(it->second);
  screen_.assign(space_.size(), std::nullopt);
  screened_.assign(space_.size(), false);
  handed_.assign(space_.size(), false);
}

int StagedSearch::distance(size_t a, size_t b) const {
  int d = 0;
  for (size_t k = 0; k < coord_[a].size(); ++k) d += coord_[a][k] != coord_[b][k];
  return d;
}

// Per family: its seeds, then the config farthest (fewest keys in common)
// from those taken so far, ties broken by a rank drawn from the seed, until
// the family's share is taken. Spread over the family's keys rather than
// clustered, so that each key's values are seen early.
std::vector<size_t> StagedSearch::sample() {
  std::vector<size_t> out;
  for (size_t f = 0; f < family_name_.size(); ++f) {
    std::vector<size_t> members;
    for (size_t i = 0; i < space_.size(); ++i)
      if (family_[i] == static_cast<int>(f)) members.push_back(i);
    const size_t share =
        space_.size() <= static_cast<size_t>(set_.screen_all_below)
            ? members.size()
            : std::min(members.size(),
                       std::max<size_t>(static_cast<size_t>(set_.sample_min),
                                        static_cast<size_t>(std::ceil(set_.sample_fraction * members.size()))));
    std::vector<size_t> taken;
    for (size_t s : seeds_)
      if (family_[s] == static_cast<int>(f)) taken.push_back(s);
    std::vector<uint64_t> rank(members.size());
    for (size_t j = 0; j < members.size(); ++j) rank[j] = mix(set_.seed * 0x100000001b3ull + members[j]);
    std::vector<int> nearest(members.size(), std::numeric_limits<int>::max());
    const auto take_into_account = [&](size_t chosen) {
      for (size_t j = 0; j < members.size(); ++j) nearest[j] = std::min(nearest[j], distance(members[j], chosen));
    };
    for (size_t s : taken) take_into_account(s);
    while (taken.size() < share) {
      size_t best = members.size();
      for (size_t j = 0; j < members.size(); ++j) {
        if (nearest[j] == 0) continue;  // taken already
        if (best == members.size() || nearest[j] > nearest[best] ||
            (nearest[j] == nearest[best] && rank[j] < rank[best]))
          best = j;
      }
      if (best == members.size()) break;
      taken.push_back(members[best]);
      take_into_account(members[best]);
    }
    for (size_t t : taken) out.push_back(t);
  }
  std::vector<size_t> batch;
  for (size_t i : out)
    if (screen_allowed(i)) batch.push_back(i);
  return batch;
}

std::vector<size_t> StagedSearch::neighbours(size_t of, int dist) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < space_.size(); ++i)
    if (distance(i, of) == dist) out.push_back(i);
  return out;
}

std::vector<size_t> StagedSearch::ranked(bool live_only) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < space_.size(); ++i)
    if (screened_[i] && screen_[i] && !(live_only && family_dead_[family_[i]])) out.push_back(i);
  std::stable_sort(out.begin(), out.end(), [&](size_t a, size_t b) { return *screen_[a] < *screen_[b]; });
  return out;
}

MeasuredUs StagedSearch::screen_us(size_t index) const { return screened_[index] ? screen_[index] : std::nullopt; }

void StagedSearch::update_families() {
  const auto all = ranked(false);
  if (all.empty()) return;
  const double best = *screen_[all.front()];
  for (size_t f = 0; f < family_name_.size(); ++f) {
    if (family_dead_[f]) continue;
    double fbest = INFINITY;
    size_t failed = 0, members = 0, seen = 0;
    for (size_t i = 0; i < space_.size(); ++i) {
      if (family_[i] != static_cast<int>(f)) continue;
      ++members;
      if (!screened_[i]) continue;
      ++seen;
      if (screen_[i]) fbest = std::min(fbest, *screen_[i]);
      else ++failed;
    }
    const std::string name = family_name_[f].empty() ? "(no family key)" : family_name_[f];
    if (std::isfinite(fbest) && fbest > set_.family_cutoff * best) {
      family_dead_[f] = true;
      char why[160];
      std::snprintf(why, sizeof why, "%s: best %.2f us at the screen, %.1fx the best %.2f us", name.c_str(), fbest,
                    fbest / best, best);
      dropped_why_.push_back(why);
    } else if (!std::isfinite(fbest) && (failed >= static_cast<size_t>(set_.sample_min) || seen == members)) {
      family_dead_[f] = true;
      dropped_why_.push_back(name + ": none of its " + std::to_string(seen) + " screened configs ran");
    }
  }
}

std::vector<size_t> StagedSearch::parents() const {
  const auto live = ranked(true);
  std::vector<size_t> out;
  if (live.empty()) return out;
  const double best = *screen_[live.front()];
  std::vector<bool> family_seen(family_name_.size(), false);
  for (size_t r = 0; r < live.size(); ++r) {
    const size_t i = live[r];
    const bool top = r < static_cast<size_t>(set_.parents);
    const bool family_best = !family_seen[family_[i]] && *screen_[i] <= set_.family_within * best;
    family_seen[family_[i]] = true;
    if (top || family_best) out.push_back(i);
  }
  return out;
}

bool StagedSearch::screen_allowed(size_t i) const { return !screened_[i] && !handed_[i] && !family_dead_[family_[i]]; }

std::vector<size_t> StagedSearch::cap(std::vector<size_t> batch) const {
  if (set_.max_screened > 0) {
    const size_t room = screened_count_ + pending_ >= static_cast<size_t>(set_.max_screened)
                            ? 0
                            : static_cast<size_t>(set_.max_screened) - screened_count_ - pending_;
    if (batch.size() > room) batch.resize(room);
  }
  return batch;
}

std::vector<size_t> StagedSearch::next_batch() {
  for (;;) {
    if (stopped_ || phase_ == Phase::confirm) {
      phase_ = Phase::confirm;
      stage_ = "confirm";
      return {};
    }
    std::vector<size_t> batch;
    if (phase_ == Phase::sample) {
      stage_ = "screen: sample";
      batch = cap(sample());
      phase_ = Phase::neighbours;
    } else if (phase_ == Phase::neighbours) {
      update_families();
      ++round_;
      stage_ = "screen: neighbours, round " + std::to_string(round_);
      std::set<size_t> chosen;
      for (size_t p : parents())
        for (size_t n : neighbours(p, 1))
          if (screen_allowed(n)) chosen.insert(n);
      batch = cap({chosen.begin(), chosen.end()});
      if (batch.empty()) phase_ = Phase::wide;
    } else if (phase_ == Phase::wide) {
      update_families();
      const auto from = parents();
      if (wide_done_) {
        // After a two-key round: go on with one-key rounds if it changed the parents, else stop.
        wide_done_ = false;
        phase_ = from != wide_from_ ? Phase::neighbours : Phase::confirm;
        continue;
      }
      if (from.empty()) {
        phase_ = Phase::confirm;
        continue;
      }
      wide_from_ = from;
      wide_done_ = true;
      stage_ = "screen: two keys from the best";
      // From each parent, first the configs a one-key step cannot reach (one
      // of the two intermediate configs is not in the space: a constraint
      // between the keys, such as a tile size and the warps that cover it),
      // then the others; the best parent's first, each group in rank order.
      std::unordered_map<std::string, size_t> at;
      for (size_t i = 0; i < space_.size(); ++i) at.emplace(coord_key(coord_[i]), i);
      std::vector<std::pair<std::tuple<int, size_t, uint64_t>, size_t>> order;
      std::set<size_t> seen;
      for (size_t r = 0; r < from.size(); ++r)
        for (size_t n : neighbours(from[r], 2)) {
          if (!screen_allowed(n) || !seen.insert(n).second) continue;
          int reachable = 1;
          for (size_t k = 0; k < coord_[n].size(); ++k) {
            if (coord_[n][k] == coord_[from[r]][k]) continue;
            std::vector<int> mid = coord_[from[r]];
            mid[k] = coord_[n][k];
            if (!at.count(coord_key(mid))) reachable = 0;
          }
          order.push_back({{reachable, r, mix(set_.seed ^ (n * 0x9e3779b97f4a7c15ull))}, n});
        }
      std::sort(order.begin(), order.end());
      for (size_t j = 0; j < order.size() && j < static_cast<size_t>(set_.wide_max); ++j)
        batch.push_back(order[j].second);
      batch = cap(batch);
    }
    if (!batch.empty()) {
      for (size_t i : batch) handed_[i] = true;
      pending_ += batch.size();
      last_batch_ = batch.size();
      return batch;
    }
    if (phase_ == Phase::wide && wide_done_) phase_ = Phase::confirm;  // nothing two keys away
    if (set_.max_screened > 0 && screened_count_ + pending_ >= static_cast<size_t>(set_.max_screened))
      phase_ = Phase::confirm;
  }
}

void StagedSearch::record(size_t index, MeasuredUs us) {
  if (index >= space_.size()) throw Error("tuner", "search: a result for config " + std::to_string(index) + " of " +
                                                       std::to_string(space_.size()));
  if (handed_[index] && !screened_[index] && pending_ > 0) --pending_;
  if (!screened_[index]) ++screened_count_;
  screened_[index] = true;
  screen_[index] = us;
}

void StagedSearch::abandon(size_t index) {
  if (index < space_.size() && handed_[index] && !screened_[index]) {
    handed_[index] = false;
    if (pending_ > 0) --pending_;
  }
}

size_t StagedSearch::expected_left() const {
  size_t next = 0;
  if (phase_ == Phase::sample) next = static_cast<size_t>(set_.parents) * 10;
  else if (phase_ == Phase::neighbours) next = last_batch_;
  else if (phase_ == Phase::wide) next = static_cast<size_t>(set_.wide_max);
  size_t left = pending_ + next;
  if (set_.max_screened > 0) {
    const size_t room = static_cast<size_t>(set_.max_screened) > screened_count_
                            ? static_cast<size_t>(set_.max_screened) - screened_count_
                            : 0;
    left = std::min(left, room);
  }
  return phase_ == Phase::confirm ? 0 : left;
}

std::optional<size_t> StagedSearch::next_contender() {
  if (phase_ != Phase::confirm) {
    phase_ = Phase::confirm;
    stage_ = "confirm";
  }
  if (!contenders_ranked_) {
    contender_order_ = ranked(false);
    contenders_ranked_ = true;
  }
  if (contender_order_.empty()) return std::nullopt;
  const double best = *screen_[contender_order_.front()];
  while (next_contender_ < contender_order_.size()) {
    const size_t i = contender_order_[next_contender_];
    const size_t ok = confirmed_ok_.size();
    const bool close = *screen_[i] <= best * (1 + set_.contender_within);
    if (ok >= static_cast<size_t>(set_.max_contenders)) return std::nullopt;
    if (ok >= static_cast<size_t>(set_.contenders) && !close) return std::nullopt;
    ++next_contender_;
    return i;
  }
  return std::nullopt;
}

void StagedSearch::confirmed(size_t index, MeasuredUs us) {
  if (us) confirmed_ok_.push_back({index, *us});
}

std::vector<size_t> StagedSearch::confirmed_ok() const {
  auto sorted = confirmed_ok_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<size_t> out;
  for (const auto& [i, us] : sorted) out.push_back(i);
  return out;
}

std::vector<size_t> run_staged_search(StagedSearch& search, const SearchHooks& hooks) {
  for (;;) {
    if (hooks.stop && hooks.stop()) search.stop_screening();
    const auto batch = search.next_batch();
    if (batch.empty()) break;
    const ScreenResults results = hooks.screen(batch);
    std::set<size_t> in_batch(batch.begin(), batch.end()), done;
    for (const auto& [index, us] : results) {
      if (!in_batch.count(index) || !done.insert(index).second)
        throw Error("tuner", "search: a screen result for config " + std::to_string(index) +
                                 ", which is not in the batch or came twice");
      search.record(index, us);
    }
    // A screen cut short (a budget ran out in the batch): the rest stay unscreened.
    if (done.size() < batch.size()) {
      for (size_t i : batch)
        if (!done.count(i)) search.abandon(i);
      search.stop_screening();
    }
    if (hooks.progress) hooks.progress(search);
  }
  while (const auto c = search.next_contender()) {
    // Past a budget, only until one contender has passed: never end with nothing.
    if (hooks.stop && hooks.stop() && !search.confirmed_ok().empty()) break;
    search.confirmed(*c, hooks.confirm(*c));
    if (hooks.progress) hooks.progress(search);
  }
  return search.confirmed_ok();
}

}  // namespace qjit::tuner
