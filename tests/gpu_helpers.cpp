// Helpers of the GPU test files: see gpu_helpers.h.
#include "tests/gpu_helpers.h"
#include <catch2/catch.hpp>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include "codegen/spec.h"
#include "runtime/driver.h"
#include "tests/helpers.h"

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

W8a8Case w8a8_case(int n) {
  W8a8Case c;
  c.shape.k = 256, c.shape.n = n, c.shape.block = 64;
  const auto spec = codegen::parse_spec("w8a8_gemm", "k=256,n=" + std::to_string(n) + ",m=16,block=64");
  c.work = tuner::make_workload(spec, fresh_seed(), 0);
  const ArgPack& a = c.work->args(0);
  auto p = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
  c.args = {p(0), p(1), p(2), p(3), p(4), nullptr, p(6), 16};
  return c;
}

qjit_w8a8_gemm_args c_args(const W8a8Case& c) {
  qjit_w8a8_gemm_args a{};
  a.k = c.shape.k, a.n = c.shape.n, a.block = c.shape.block, a.x = c.args.x, a.wq = c.args.wq;
  a.w_scale = c.args.w_scale, a.w_offset = c.args.w_offset, a.w_sum = c.args.w_sum, a.y = c.args.y, a.m = c.args.m;
  return a;
}

CUcontext current_context() {
  CUcontext c = nullptr;
  QJIT_CU(cuCtxGetCurrent(&c));
  return c;
}

std::string stderr_of(const std::function<void()>& f) {
  TempDir dir;
  const std::string path = dir.file("stderr.txt");
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* file = std::fopen(path.c_str(), "w");
  dup2(fileno(file), 2);
  try {
    f();
  } catch (...) {
    std::fflush(stderr), dup2(saved, 2), close(saved), std::fclose(file);
    throw;
  }
  std::fflush(stderr), dup2(saved, 2), close(saved), std::fclose(file);
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace qjit::test
