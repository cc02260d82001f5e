// gru_quant on the GPU: every candidate equals the CPU reference bit for bit
// (the tuner verifies each) over random params documents — bit widths 4..16,
// jittered shifts, zero points at their limits, 8..32 LUT segments — and
// shapes with T ∈ {1, 7, 100}, N ∈ {1, 3, 64}, H not a multiple of 32, C ≠ H;
// then the typed API.
#include <catch2/catch.hpp>

#include <random>

#include "cache/store.h"
#include "codegen/ops/gru_quant.h"
#include "codegen/spec.h"
#include "qjit/qjit.h"
#include "qjit/qjit_c.h"
#include "runtime/device.h"
#include "tests/gpu_helpers.h"
#include "tests/gru_helpers.h"
#include "tests/helpers.h"
#include "tuner/workload.h"

using namespace qjit;

namespace {

codegen::OpSpec gru_spec(std::mt19937_64& rng, int t, int n, int c, int h, int bits_lo, int bits_hi) {
  return codegen::make_spec("gru_quant", {{"t", t}, {"n", n}, {"c", c}, {"h", h},
                                          {"params", codegen::gru::canonical_params(
                                                         test::random_gru_params(rng, c, h, bits_lo, bits_hi))}});
}

}  // namespace

TEST_CASE("gru_quant: every candidate equals the CPU bit for bit over random params and shapes (tuner)", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  struct Shape {
    int t, n, c, h, bits_lo, bits_hi;
  };
  for (const Shape& s : {Shape{1, 1, 16, 32, 8, 8}, Shape{7, 3, 40, 37, 4, 16}, Shape{100, 1, 64, 64, 8, 8},
                         Shape{20, 64, 33, 70, 12, 16}, Shape{100, 3, 24, 48, 4, 8}, Shape{7, 1, 5, 3, 16, 16}}) {
    const auto spec = gru_spec(rng, s.t, s.n, s.c, s.h, s.bits_lo, s.bits_hi);
    INFO("t=" << s.t << " n=" << s.n << " c=" << s.c << " h=" << s.h << " params " << spec.get_str("params").substr(0, 400));
    test::expect_every_candidate_verifies(store, spec, /*allow_pruned=*/false);
  }
}

TEST_CASE("gru_quant: the typed API, bit-exact, tuned or not", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("api.db"));
  std::mt19937_64 rng(test::fresh_seed());
  const auto spec = gru_spec(rng, 11, 2, 30, 45, 6, 12);
  auto work = tuner::make_workload(spec, test::fresh_seed(), 0);
  const ArgPack& a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
  // The document as a user writes it (not canonical): the entry point canonicalises it.
  GruQuantShape shape{11, 2, 30, 45, codegen::gru::params_of(spec).to_json().dump(2)};
  work->poison_output(nullptr);
  CHECK_THROWS_WITH(gru_quant(shape, {ptr(0), ptr(1), ptr(2), ptr(3), nullptr, ptr(5), ptr(6)}), Catch::Contains("bw is null"));
  CHECK_FALSE(work->verify(1.0).ok);
  // Without y_float the states are right and the float output is not written.
  gru_quant(shape, {ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), ptr(5), ptr(6)});
  auto v = work->verify(1.0);
  CHECK_THAT(v.message, Catch::Contains("y_float"));
  CHECK_FALSE(v.ok);
  gru_quant(shape, {ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), ptr(5), ptr(6), ptr(7)});
  v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
}

TEST_CASE("gru_quant: the C API, bit-exact, errors as status and text", "[gpu]") {
  test::TempDir dir;
  REQUIRE(qjit_set_cache_path(dir.file("c.db").c_str()) == QJIT_OK);
  std::mt19937_64 rng(test::fresh_seed());
  const auto spec = gru_spec(rng, 9, 3, 20, 33, 8, 16);
  auto work = tuner::make_workload(spec, test::fresh_seed(), 0);
  const ArgPack& a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
  const std::string params = spec.get_str("params");
  qjit_gru_quant_args args{9, 3, 20, 33, params.c_str(), ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), ptr(5), ptr(6), ptr(7)};
  work->poison_output(nullptr);
  REQUIRE(qjit_gru_quant(&args, nullptr) == QJIT_OK);
  CHECK(std::string(qjit_last_error()).empty());
  const auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
  qjit_gru_quant_args wrong = args;
  wrong.h = 34;
  CHECK(qjit_gru_quant(&wrong, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(qjit_last_error(), Catch::Contains("h=34"));
  wrong = args;
  wrong.R = nullptr;
  CHECK(qjit_gru_quant(&wrong, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(qjit_last_error(), Catch::Contains("R is null"));
  CHECK(qjit_gru_quant(nullptr, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
}
