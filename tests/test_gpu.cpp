// GPU tests: run only through `qjit_tests "[gpu]"`, which exits 77 (skipped)
// without a device. Inputs are fresh random data from the tuner's workload;
// results are checked against the float64 CPU reference with the stated
// tolerance of each output type (tuner/reference/fused_ffn.cpp).
#include <catch2/catch.hpp>
#include <sqlite3.h>
#include <cmath>
#include <cstring>
#include <random>
#include "cache/store.h"
#include "codegen/numeric.h"
#include "codegen/ops/fp_lut.h"
#include "codegen/ops/wq_gemm.h"
#include "codegen/registry.h"
#include "qjit/qjit.h"
#include "qjit/qjit_c.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tests/helpers.h"
#include "tuner/bench.h"
#include "tuner/reference/fp_lut.h"
#include "tuner/timing.h"
#include "tuner/tuner.h"
#include "tuner/workload.h"

using namespace qjit;

namespace {

uint64_t fresh_seed() { return (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); }

// The kernel parameters of a workload, as plain device pointers.
struct Pointers {
  void *x, *w1, *w3, *y;
};
Pointers pointers(tuner::Workload& w) {
  void** a = w.args(0);
  auto p = [&](int i) { return reinterpret_cast<void*>(*static_cast<CUdeviceptr*>(a[i])); };
  return {p(0), p(1), p(2), p(3)};
}

DType dtype_of(const std::string& s) {
  return s == "fp16" ? DType::fp16 : s == "bf16" ? DType::bf16 : s == "fp32" ? DType::fp32 : DType::mixed;
}

// Runs fused_ffn through the typed API on fresh random inputs (output
// poisoned first) and checks it against the CPU reference.
void check_fused_ffn(const FusedFfnShape& s) {
  const uint64_t seed = fresh_seed();
  auto spec = codegen::make_spec("fused_ffn", {{"d", s.d}, {"h", s.h}, {"m", s.m}, {"dtype", to_string(s.dtype)},
                                               {"act", to_string(s.act)}});
  INFO(spec.label() << " seed " << seed);
  auto work = tuner::make_workload(spec, seed, 0);
  work->poison_output(nullptr);
  Pointers p = pointers(*work);
  fused_ffn(s, p.x, p.w1, p.w3, p.y, nullptr);
  auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
}

// Tunes `spec` from scratch on fresh random inputs and checks that every
// candidate has a trial and verified; with allow_pruned, a candidate pruned
// for spilling is accepted too, but only as the exception. A launch refused
// for resources is never accepted: the legality rules or the runtime are
// wrong (a block of more than 48 KB of shared memory that did not opt in
// once hid that way).
tuner::TuneReport expect_every_candidate_verifies(cache::Store& store, const codegen::OpSpec& spec, bool allow_pruned,
                                                  int budget_candidates = 0, int max_pruned_percent = 10) {
  tuner::TuneOptions opt;
  opt.seed = fresh_seed();
  opt.budget_candidates = budget_candidates;
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

}  // namespace

TEST_CASE("fused_ffn: every dtype and M = 1..8, odd d, through the typed runtime API", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("kernels.db"));
  for (std::string dtype : {"fp16", "bf16", "fp32", "mixed"})
    for (int m = 1; m <= 8; ++m)
      for (auto [d, h] : {std::pair{4095, 77}, std::pair{4096, 300}, std::pair{1000, 129}})
        check_fused_ffn({d, h, m, dtype_of(dtype), Activation::silu});
}

TEST_CASE("fused_ffn: every candidate of the tunable space verifies (tuner)", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (auto [shape, dtype] : {std::pair{"d=4104,h=260,m=3", "fp16"}, std::pair{"d=4088,h=70,m=8", "bf16"},
                              std::pair{"d=4090,h=70,m=8", "bf16"},
                              std::pair{"d=1001,h=33,m=1", "fp32"}}) {
    auto params = codegen::parse_kv_list(shape);
    params["dtype"] = dtype;
    auto spec = codegen::make_spec("fused_ffn", params);
    auto rep = expect_every_candidate_verifies(store, spec, /*allow_pruned=*/true);
    CHECK(rep.best.tuned);
    CHECK(rep.best.median_us > 0);
    // Incremental: a second run measures nothing new.
    tuner::TuneOptions opt;
    auto again = tuner::tune(spec, store, opt);
    CHECK(again.measured_now == 0);
    CHECK(again.skipped_known == rep.candidates_total);
  }
}

TEST_CASE("C API: launch, and argument errors that launch nothing", "[gpu]") {
  test::TempDir dir;
  REQUIRE(qjit_set_cache_path(dir.file("kernels.db").c_str()) == QJIT_OK);
  auto spec = codegen::make_spec("fused_ffn", {{"d", 2048}, {"h", 512}, {"m", 2}, {"dtype", "fp16"}});
  auto work = tuner::make_workload(spec, fresh_seed(), 0);
  Pointers p = pointers(*work);
  work->poison_output(nullptr);
  REQUIRE(qjit_fused_ffn(2048, 512, 2, "fp16", nullptr, p.x, p.w1, p.w3, p.y, nullptr) == QJIT_OK);
  CHECK(std::string(qjit_last_error()).empty());
  auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);

  // Each bad call must fail before launching: the poisoned output stays poisoned.
  work->poison_output(nullptr);
  const char* w1_misaligned = static_cast<const char*>(p.w1) + 2;
  CHECK(qjit_fused_ffn(2048, 512, 2, "fp16", nullptr, p.x, w1_misaligned, p.w3, p.y, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(qjit_last_error(), Catch::Contains("w1") && Catch::Contains("aligned"));
  CHECK(qjit_fused_ffn(2048, 512, 2, "fp16", nullptr, nullptr, p.w1, p.w3, p.y, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(qjit_last_error(), Catch::Contains("x is null"));
  CHECK(qjit_fused_ffn(2048, 512, 2, "int4", nullptr, p.x, p.w1, p.w3, p.y, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(qjit_last_error(), Catch::Contains("int4"));
  CHECK(qjit_fused_ffn(2048, 512, 9, "fp16", nullptr, p.x, p.w1, p.w3, p.y, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(qjit_last_error(), Catch::Contains("m=9"));
  CHECK(qjit_fused_ffn(0, 512, 2, "fp16", nullptr, p.x, p.w1, p.w3, p.y, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_FALSE(work->verify(1.0).ok);  // still poisoned: nothing ran
}

TEST_CASE("a kernel tuned by another process is reloaded, marked tuned, and correct", "[gpu]") {
  test::TempDir dir;
  const std::string db = dir.file("kernels.db");
  auto r = test::run_qjit("tune --op fused_ffn --shape d=1024,h=384,m=4 --budget 12 -q --json", db);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  const nlohmann::json chosen = j[0]["best"]["config"];

  set_cache_path(db);
  auto spec = codegen::make_spec("fused_ffn", {{"d", 1024}, {"h", 384}, {"m", 4}});
  const auto& k = runtime::KernelCache::instance().get("test|tuned-reload", [&] { return spec; });
  CHECK(k.tuned);
  CHECK(k.config == chosen);
  check_fused_ffn({1024, 384, 4, DType::fp16});
}

TEST_CASE("a corrupt cached cubin is never launched: removed, rebuilt, still correct", "[gpu]") {
  test::TempDir dir;
  const std::string db = dir.file("kernels.db");
  auto spec = codegen::make_spec("fused_ffn", {{"d", 512}, {"h", 100}, {"m", 1}});
  {
    cache::Store store(db);
    store.put(runtime::build_record(spec, codegen::find_op("fused_ffn").default_config(spec), /*tuned=*/true));
  }
  // Damage the stored blob behind the store's back (as a disk error would).
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &raw) == SQLITE_OK);
  REQUIRE(sqlite3_exec(raw, "UPDATE kernels SET cubin = zeroblob(length(cubin))", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  sqlite3_close(raw);

  set_cache_path(db);
  check_fused_ffn({512, 100, 1, DType::fp16});
  cache::Store store(db);
  auto rec = store.lookup(runtime::fingerprint(spec).key());
  REQUIRE(rec);
  CHECK_FALSE(rec->tuned);  // the corrupt row was removed and rebuilt from the default config
}

// ---- fp_lut ----------------------------------------------------------------

TEST_CASE("fp_lut: all 65536 fp16 inputs, every function and output type, bit-equal to the CPU", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("kernels.db"));
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  tuner::DeviceBuffer x(all.size() * 2), y(all.size() * 4);
  x.upload(all.data(), all.size() * 2);
  std::vector<std::pair<std::string, std::string>> tables;  // fn, cuts
  for (const auto& fn : codegen::lut::function_names()) tables.push_back({fn, "default"});
  tables.push_back({"silu", "seed"});
  for (const auto& [fn, cuts] : tables)
    for (auto out : {DType::fp16, DType::bf16, DType::fp32}) {
      INFO(fn << " cuts=" << cuts << " out=" << to_string(out));
      QJIT_CU(cuMemsetD8(y.ptr(), 0xa5, y.bytes()));
      fp_lut({fn, 65536, DType::fp16, out, cuts}, reinterpret_cast<void*>(x.ptr()), reinterpret_cast<void*>(y.ptr()));
      QJIT_CU(cuCtxSynchronize());
      const size_t ob = out == DType::fp32 ? 4 : 2;
      std::vector<uint8_t> got(all.size() * ob);
      y.download(got.data(), got.size());
      auto spec = codegen::make_spec("fp_lut", {{"n", 65536}, {"fn", fn}, {"cuts", cuts}, {"out", to_string(out)}});
      const auto table = codegen::lut_table_of(spec);
      int mismatches = 0;
      uint32_t first_x = 0, first_got = 0, first_want = 0;
      for (uint32_t i = 0; i < 65536; ++i) {
        uint32_t g = 0;
        std::memcpy(&g, &got[i * ob], ob);
        const uint32_t w = tuner::lut_reference_bits(table, "fp16", to_string(out), i);
        const bool both_nan = out == DType::fp32 ? std::isnan(bits_to_float(g)) && std::isnan(bits_to_float(w))
                              : out == DType::bf16 ? ((g & 0x7f80) == 0x7f80 && (g & 0x7f)) && ((w & 0x7f80) == 0x7f80 && (w & 0x7f))
                                                   : ((g & 0x7c00) == 0x7c00 && (g & 0x3ff)) && ((w & 0x7c00) == 0x7c00 && (w & 0x3ff));
        if (g != w && !both_nan && mismatches++ == 0) first_x = i, first_got = g, first_want = w;
      }
      INFO("first mismatch: x bits 0x" << std::hex << first_x << " got 0x" << first_got << " want 0x" << first_want);
      CHECK(mismatches == 0);
    }
}

TEST_CASE("fp_lut: every candidate verifies on random odd-length tensors (tuner)", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (const char* shape : {"n=1000003,fn=gelu,in=bf16,out=fp32", "n=333331,fn=sin,in=fp32,out=fp16",
                            "n=4097,fn=exp,in=fp16,out=bf16"}) {
    expect_every_candidate_verifies(store, codegen::parse_spec("fp_lut", shape), /*allow_pruned=*/false);
  }
}

TEST_CASE("a candidate that a tuning run stopped on is skipped afterwards, and --retune measures it", "[gpu]") {
  // The tuner stores a candidate as unfinished before the GPU runs it and
  // replaces that with its result; one still unfinished means the run died
  // on it (a fault poisons the context, a hang gets the process killed).
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  const auto spec = codegen::parse_spec("fp_lut", "n=4097,fn=exp,in=fp16,out=bf16");
  tuner::TuneOptions opt;
  opt.seed = fresh_seed();
  const auto first = tuner::tune(spec, store, opt);
  for (const auto& t : first.trials) CHECK(t.message != tuner::kUnfinishedTrial);  // every placeholder replaced
  // The fastest candidate (not a library baseline): a run that died on it must not pick it.
  const auto fastest = std::find_if(first.trials.begin(), first.trials.end(),
                                    [](const cache::TrialRecord& t) { return !t.config.contains("baseline"); });
  REQUIRE(fastest != first.trials.end());
  REQUIRE(first.candidates_total >= 2);
  cache::TrialRecord died = *fastest;
  died.status = cache::TrialStatus::wrong_result;
  died.message = tuner::kUnfinishedTrial;
  died.median_us = 0;
  store.put_trials({died});
  const auto again = tuner::tune(spec, store, opt);
  CHECK(again.measured_now == 0);
  CHECK(again.skipped_known == first.candidates_total);
  CHECK(again.best.config != died.config);
  const auto kept = std::find_if(again.trials.begin(), again.trials.end(),
                                 [&](const cache::TrialRecord& t) { return t.config == died.config; });
  REQUIRE(kept != again.trials.end());
  CHECK(kept->message == tuner::kUnfinishedTrial);
  tuner::TuneOptions retune = opt;
  retune.retune = true;
  retune.only_configs = {died.config};
  const auto measured = tuner::tune(spec, store, retune);
  CHECK(measured.measured_now == 1);
  for (const auto& t : measured.trials)
    if (t.config == died.config) CHECK(t.status == cache::TrialStatus::ok);
}

TEST_CASE("fused_ffn with the FP16 SiLU table: every candidate and the typed API", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (const char* shape : {"d=1024,h=300,m=5,act=silu_lut", "d=1000,h=64,m=1,act=silu_lut_seed,dtype=fp32"}) {
    expect_every_candidate_verifies(store, codegen::parse_spec("fused_ffn", shape), /*allow_pruned=*/true);
  }
  set_cache_path(dir.file("kernels.db"));
  check_fused_ffn({2048, 500, 3, DType::fp16, Activation::silu_lut_seed});
}

// ---- awq_dequant --------------------------------------------------------------

TEST_CASE("awq_dequant: every layout, zero mode, scale type and group, bit-exact (tuner verifies every candidate)",
          "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (std::string layout : {"awq", "gptq"})
    for (std::string zero : {"int", "sym"})
      for (std::string scales : {"fp16", "bf16"})
        for (int g : {32, 64, 128, 384}) {  // 384 = k: one group
          if (layout == "awq" && zero == "sym") continue;  // not a layout that exists
          // n = 40: the smallest legal multiples are 8; 40 is not a multiple of 16 or 32.
          auto spec = codegen::make_spec("awq_dequant", {{"k", 384}, {"n", 40}, {"g", g}, {"layout", layout},
                                                         {"zero", zero}, {"scales", scales}});
          expect_every_candidate_verifies(store, spec, /*allow_pruned=*/false);
        }
  // Large shapes with every group size, through the tuner's verification.
  for (int g : {32, 64, 128, 4096}) {
    auto spec = codegen::make_spec("awq_dequant", {{"k", 4096}, {"n", 1024}, {"g", g}});
    expect_every_candidate_verifies(store, spec, /*allow_pruned=*/false, /*budget_candidates=*/3);
  }
}

namespace {

DType wq_type(const std::string& s) { return s == "fp16" ? DType::fp16 : s == "bf16" ? DType::bf16 : DType::fp32; }

// Runs wq_gemm through the typed API with `rows` rows of x on fresh random
// inputs (output poisoned first) and checks it against the float64 reference.
// in_place: y starts as the residual and is passed as it (y += X·Wᵀ).
void check_wq_gemm(const nlohmann::json& params, int rows, bool in_place = false) {
  const uint64_t seed = fresh_seed();
  nlohmann::json p = params;
  p["m"] = codegen::wq_gemm_bucket(rows);
  const auto spec = codegen::make_spec("wq_gemm", p);
  INFO(spec.label() << " M=" << rows << " seed " << seed);
  auto work = tuner::make_wq_gemm_workload(spec, seed, 0, rows);
  work->poison_output(nullptr);
  void** a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<void*>(*static_cast<CUdeviceptr*>(a[i])); };
  WqGemmShape s;
  s.k = static_cast<int>(spec.get_int("k")), s.n = static_cast<int>(spec.get_int("n"));
  s.bits = static_cast<int>(spec.get_int("bits")), s.g = static_cast<int>(spec.get_int("g"));
  s.zero = spec.get_str("zero"), s.scales = wq_type(spec.get_str("scales")), s.x = wq_type(spec.get_str("x"));
  s.bias = spec.get_str("bias") == "yes", s.act = spec.get_str("act"), s.residual = spec.get_str("residual") == "yes";
  void* residual = ptr(5);
  if (in_place) {
    REQUIRE(s.residual);
    const size_t bytes = static_cast<size_t>(rows) * s.n * (s.x == DType::fp32 ? 4 : 2);
    QJIT_CU(cuMemcpyDtoD(*static_cast<CUdeviceptr*>(a[6]), *static_cast<CUdeviceptr*>(a[5]), bytes));
    residual = ptr(6);
  }
  wq_gemm(s, rows, ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), residual, ptr(6), nullptr);
  auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
}

}  // namespace

TEST_CASE("wq_gemm: every bit width, zero mode and scale type, odd M, smallest legal K and N (typed API)", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("kernels.db"));
  const int kRows[] = {1, 3, 7, 13, 37, 100};
  const char* kX[] = {"fp16", "bf16", "fp32"};
  const char* kAct[] = {"none", "relu", "relu6"};
  struct Kng { int k, n, g; };
  const Kng kShapes[] = {{64, 16, 32}, {192, 48, 64}, {256, 32, 256}, {128, 16, 128}};
  int i = 0;
  for (int bits : {2, 3, 4, 8})
    for (std::string zero : {"sym", "int", "float"})
      for (std::string scales : {"fp16", "bf16"}) {
        const Kng s = kShapes[i % 4];
        check_wq_gemm({{"k", s.k}, {"n", s.n}, {"g", s.g}, {"bits", bits}, {"zero", zero}, {"scales", scales},
                       {"x", kX[i % 3]}, {"bias", i % 2 ? "yes" : "no"}, {"act", kAct[(i / 2) % 3]},
                       {"residual", i % 4 == 1 ? "yes" : "no"}},
                      kRows[i % 6]);
        ++i;
      }
  // The main shape across the M buckets, M = 1500 looping past the 1024 bucket's grid.
  for (int rows : {1, 2, 5, 16, 33, 64, 129, 300, 1024, 1500})
    check_wq_gemm({{"k", 4096}, {"n", 4096}, {"bits", 4}, {"zero", "int"}}, rows);
  // The full FFN's second half: y += W2·h in place (residual = y).
  for (int rows : {1, 8, 37})
    check_wq_gemm({{"k", 11008}, {"n", 4096}, {"residual", "yes"}}, rows, /*in_place=*/true);
}

TEST_CASE("wq_gemm: every candidate verifies (tuner); bad arguments launch nothing", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (const char* shape : {"k=1024,n=528,m=1", "k=320,n=48,m=16,bits=3,zero=float,scales=bf16,g=64",
                            // rings whose static sums and dynamic slots pass 48 KB only together (opt-in)
                            "k=512,n=96,m=16",
                            // chunk pairs in one group over k, warps with no pair (split 8 of 6 pairs)
                            "k=768,n=80,m=4,g=768,zero=sym",
                            // the L2 look-ahead's line-by-line path (2 bits), two groups per chunk, fp32 x's two lines
                            "k=256,n=48,m=2,bits=2,g=32,x=fp32",
                            "k=256,n=64,m=64,bits=8,x=fp32,zero=sym,bias=yes,act=relu",
                            "k=512,n=32,m=1024,bits=2,x=bf16,g=32",
                            // the tiled and wgmma families: n and k not multiples of their blocks, x converted to bf16
                            "k=320,n=80,m=64,bits=3,zero=float,scales=bf16,g=64",
                            "k=512,n=112,m=256,bits=8,x=bf16,scales=bf16,bias=yes,act=relu6,residual=yes",
                            "k=1024,n=272,m=128,bits=4,zero=sym,g=32",
                            // wgmma with bf16 x and scales, 3 bits, float zeros
                            "k=320,n=80,m=64,bits=3,zero=float,scales=bf16,x=bf16,g=64"}) {
    auto spec = codegen::parse_spec("wq_gemm", shape);
    // Register estimates prune most spilling wq_gemm candidates; ptxas spills
    // a few more (fp32 x, 3 bits), which the tuner then prunes.
    auto rep = expect_every_candidate_verifies(store, spec, /*allow_pruned=*/true, 0, /*max_pruned_percent=*/25);
    CHECK(rep.best.tuned);
  }
  set_cache_path(dir.file("api.db"));
  auto spec = codegen::parse_spec("wq_gemm", "k=256,n=64,m=4");
  auto work = tuner::make_wq_gemm_workload(spec, fresh_seed(), 0, 3);
  void** a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<char*>(*static_cast<CUdeviceptr*>(a[i])); };
  WqGemmShape s{256, 64};
  work->poison_output(nullptr);
  CHECK_THROWS_WITH(wq_gemm(s, 3, ptr(0), ptr(1) + 4, ptr(2), ptr(3), nullptr, nullptr, ptr(6)),
                    Catch::Contains("qweight") && Catch::Contains("not aligned to 16"));
  CHECK_THROWS_WITH(wq_gemm(s, 3, ptr(0), ptr(1), ptr(2), nullptr, nullptr, nullptr, ptr(6)),
                    Catch::Contains("zeros is null"));
  CHECK_THROWS_WITH(wq_gemm(s, 3, ptr(0), ptr(1), ptr(2), ptr(3), ptr(0), nullptr, ptr(6)),
                    Catch::Contains("bias is given"));
  CHECK_THROWS_WITH(wq_gemm(s, 3, ptr(0), ptr(1), ptr(2), ptr(3), nullptr, ptr(0), ptr(6)),
                    Catch::Contains("residual is given"));
  CHECK_THROWS_WITH(wq_gemm(s, -1, ptr(0), ptr(1), ptr(2), ptr(3), nullptr, nullptr, ptr(6)), Catch::Contains("m=-1"));
  CHECK_FALSE(work->verify(1.0).ok);  // still poisoned: nothing ran
  wq_gemm(s, 3, ptr(0), ptr(1), ptr(2), ptr(3), nullptr, nullptr, ptr(6));
  auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
}

TEST_CASE("wq_gemm balanced schedule: split row groups summed right launch after launch, and on two streams", "[gpu]") {
  using runtime::driver;
  // Several blocks share a row group of k = 1024 (16 chunks), and some
  // blocks have no units; 4096 x 11008 is the shape the schedule is for.
  for (const char* shape : {"k=1024,n=528,m=4", "k=4096,n=11008,m=1", "k=4096,n=4096,m=16,bits=8,zero=sym"}) {
    const auto spec = codegen::parse_spec("wq_gemm", shape);
    const bool wide = spec.get_int("m") > 8;
    // At m = 16 (8 bits) the ring's slots of 16 rows of x need more than 48 KB,
    // and 3 blocks of the register pipeline more registers than an SM has.
    for (int balance : {1, wide ? 2 : 3}) {
      // The register pipeline (2 tiles), and the cp.async ring (1 tile).
      const bool ring = balance == 3;
      nlohmann::json config = {{"warps", 4}, {"split_k", 4}, {"tiles", ring ? 1 : 2},
                               {"mtiles", wide ? 2 : 1}, {"unroll", ring ? 1 : 2},
                               {"stages", ring ? 4 : 0}, {"balance", balance}};
      if (spec.get_str("zero") != "float") config["zero_after"] = 1;
      const uint64_t seed = fresh_seed();
      INFO(spec.label() << " " << config.dump() << " seed " << seed);
      const auto kernel = runtime::load_record(runtime::build_record(spec, config, false), spec);
      auto work = tuner::make_wq_gemm_workload(spec, seed, 0, std::max<int64_t>(1, spec.get_int("m") - 1));
      CUstream streams[2] = {nullptr, nullptr};
      QJIT_CU(cuStreamCreate(&streams[0], CU_STREAM_NON_BLOCKING));
      QJIT_CU(cuStreamCreate(&streams[1], CU_STREAM_NON_BLOCKING));
      // Back to back on one stream: every launch finds the counters its
      // predecessor reset (a stale count would complete a row group early).
      for (int round = 0; round < 3; ++round) {
        work->poison_output(streams[0]);
        for (int i = 0; i < 5; ++i) runtime::launch(kernel, work->args(0), streams[0]);
        QJIT_CU(cuStreamSynchronize(streams[0]));
        const auto v = work->verify(1.0);
        INFO("round " << round << ": " << v.message);
        CHECK(v.ok);
      }
      // Two streams at once, each on its own workspace (they write the same y).
      work->poison_output(nullptr);
      QJIT_CU(cuCtxSynchronize());
      for (int i = 0; i < 6; ++i) runtime::launch(kernel, work->args(0), streams[i % 2]);
      QJIT_CU(cuCtxSynchronize());
      const auto v = work->verify(1.0);
      INFO(v.message);
      CHECK(v.ok);
      for (CUstream s : streams) driver().cuStreamDestroy(s);
      driver().cuModuleUnload(kernel.module);
    }
  }
}

namespace {

// One config of a wq_gemm shape, run at M inside its bucket (rows).
struct BucketCase {
  nlohmann::json params, config;
  std::vector<int> rows;
};

// Tunes each case's config alone, at the bucket of its first M, into its own
// cache (cases may share a spec), then runs the cached kernel through the
// typed API at every M of the case against the reference.
template <size_t N>
void run_inside_bucket(const BucketCase (&cases)[N]) {
  test::TempDir dir;
  int n = 0;
  for (const BucketCase& c : cases) {
    const std::string db = dir.file("kernels_" + std::to_string(n++) + ".db");
    cache::Store store(db);
    set_cache_path(db);
    nlohmann::json p = c.params;
    p["m"] = codegen::wq_gemm_bucket(c.rows.front());
    const auto spec = codegen::make_spec("wq_gemm", p);
    tuner::TuneOptions opt;
    opt.seed = fresh_seed();
    opt.only_configs = {c.config};
    const auto rep = tuner::tune(spec, store, opt);
    INFO(spec.label() << " " << c.config.dump());
    REQUIRE(rep.best.config == c.config);
    for (int rows : c.rows) check_wq_gemm(c.params, rows);
  }
}

}  // namespace

TEST_CASE("wq_gemm mma ring: M inside the bucket, rows of x past M copied from row M - 1 (typed API)", "[gpu]") {
  // The tuner verifies at the bucket's M; these run the cached ring kernel
  // at M below it, where a slot's rows past M hold row M - 1 and x's own
  // row blocks (kXOwnRounds) clamp rows to M - 1: pairs of fp16 and fp32 x
  // (2 and 4 rounds a row block) and single chunks (1), over 1 to 4 row
  // blocks; and pairs with x in registers (x_regs), whose rows past M load
  // row M - 1.
  const auto ring = [](int warps, int split, int mtiles, int stages, int pair, int x_regs = 0) {
    nlohmann::json j{{"warps", warps}, {"split_k", split}, {"tiles", 2}, {"mtiles", mtiles}, {"unroll", 1}, {"stages", stages}};
    if (pair) j["pair"] = 1;
    if (x_regs) j["x_regs"] = 1;
    return j;
  };
  const nlohmann::json w4{{"k", 1024}, {"n", 528}, {"bits", 4}, {"zero", "int"}};
  const nlohmann::json w4_fp32{{"k", 1024}, {"n", 528}, {"bits", 4}, {"zero", "sym"}, {"x", "fp32"}};
  const BucketCase cases[] = {
      {w4, ring(4, 4, 2, 2, 1), {9, 15}},
      {w4, ring(8, 8, 1, 3, 1), {5, 7}},
      {w4, ring(4, 4, 1, 4, 0), {3}},
      {w4_fp32, ring(4, 4, 1, 2, 1), {3}},
      {w4, ring(4, 4, 2, 2, 1, 1), {9, 13}},
      {w4_fp32, ring(8, 8, 1, 3, 1, 1), {6}},
  };
  run_inside_bucket(cases);
}

TEST_CASE("wq_gemm wgmma family: M inside the bucket, the last block partly past M (typed API)", "[gpu]") {
  if (runtime::current_device().arch != "sm_90") {
    WARN("not run: the wgmma family runs on compute capability 9.0 only");
    return;
  }
  // The tuner verifies at the bucket's M; these run the cached wgmma kernel at
  // M that leave rows of the last block past M (copied as zeros, not stored)
  // and, in the 1024 bucket, loop past the grid (a split's clusters loop
  // together). One cache per case: cases may share a spec.
  const auto wgmma = [](int groups, int rows, int stages, int chunks, int split = 1, int producer = 0, int a_smem = 0,
                        int stream = 0, int a_quad = 0, int ws = 0, int tma_x = 0, int stage_y = 0, int tma_w = 0) {
    nlohmann::json j{{"family", "wgmma"}, {"groups", groups}, {"rows", rows}, {"stages", stages}, {"chunks", chunks}};
    if (split > 1) j["split"] = split;
    if (producer) j["producer"] = producer;
    if (a_smem) j["a_smem"] = a_smem;
    if (stream) j["stream"] = stream;
    if (a_quad) j["a_quad"] = a_quad;
    if (ws) j["ws"] = ws;
    if (tma_x) j["tma_x"] = tma_x;
    if (stage_y) j["stage_y"] = stage_y;
    if (tma_w) j["tma_w"] = tma_w;
    return j;
  };
  const BucketCase cases[] = {
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}}, wgmma(2, 128, 4, 2), {129, 200}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 1), {65, 100}},
      {{{"k", 512}, {"n", 128}, {"bits", 8}, {"zero", "sym"}, {"bias", "yes"}, {"act", "relu"}}, wgmma(2, 256, 4, 1),
       {1025, 1500}},
      // split k over clusters of 2 to 4 blocks: stages past k (5 stages in 4 blocks of 2), the epilogue after the sum
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}}, wgmma(2, 128, 4, 2, 3), {129, 256}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 1, 4), {65, 128}},
      {{{"k", 768}, {"n", 128}, {"bits", 2}, {"zero", "sym"}, {"bias", "yes"}, {"act", "relu6"}, {"residual", "yes"}},
       wgmma(2, 256, 3, 1, 2), {1025, 1500}},
      // a producer warpgroup issuing the copies, alone and with a split
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}}, wgmma(2, 128, 4, 1, 1, 1), {129, 256}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 2, 2, 1), {65, 128}},
      {{{"k", 768}, {"n", 128}, {"bits", 8}, {"zero", "int"}, {"bias", "yes"}, {"residual", "yes"}},
       wgmma(1, 128, 3, 1, 3, 1), {1025, 1500}},
      // the dequantised weights through shared memory (x copied in natural order): with a split, a
      // producer, one warpgroup of 256 rows, and two chunks per stage
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}}, wgmma(2, 128, 3, 2, 3, 0, 1), {129, 256}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 2, 2, 1, 1), {65, 100}},
      {{{"k", 768}, {"n", 128}, {"bits", 8}, {"zero", "sym"}, {"bias", "yes"}, {"act", "relu"}},
       wgmma(1, 256, 3, 1, 1, 0, 1), {1025, 1500}},
      {{{"k", 768}, {"n", 128}, {"bits", 2}, {"zero", "int"}, {"residual", "yes"}, {"g", 32}},
       wgmma(1, 256, 4, 1, 2, 1, 1), {257, 512}},
      // the stream schedule: tiles split between 2 to 4 blocks (fewer units than 132 SMs × blocks hold,
      // so some blocks have none), runs of several pieces, m-blocks past M, a producer, 2 blocks per SM
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}}, wgmma(1, 128, 4, 1, 1, 0, 0, 1), {129, 256}},
      {{{"k", 4096}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"bias", "yes"}, {"act", "relu"}},
       wgmma(2, 64, 3, 2, 1, 0, 0, 2), {65, 128}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 1, 1, 1, 1, 3), {65, 100}},
      {{{"k", 2048}, {"n", 512}, {"bits", 8}, {"zero", "sym"}, {"residual", "yes"}}, wgmma(2, 256, 4, 1, 1, 0, 1, 1),
       {257, 512}},
      // A traded into natural k order within each quad (4-bit): two groups per chunk (g = 32, a step's
      // group is its own), float zeros with bf16, a producer, 256 rows with the stream schedule
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"g", 32}}, wgmma(1, 64, 3, 2, 2, 0, 0, 0, 1), {65, 100}},
      {{{"k", 320}, {"n", 80}, {"bits", 4}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 128, 4, 1, 1, 1, 0, 1, 1), {129, 200}},
      {{{"k", 768}, {"n", 128}, {"bits", 4}, {"zero", "sym"}, {"bias", "yes"}, {"act", "relu6"}},
       wgmma(2, 256, 4, 1, 1, 0, 0, 1, 1), {257, 512}},
      // warp specialisation (mbarriers per slot, setmaxnreg): the 1024 bucket's loop over M (the block's
      // stage count runs on across tiles), the stream schedule (runs of pieces shorter than the ring,
      // split tiles), one consumer warpgroup with x permuted and stages past k, A through shared memory
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}}, wgmma(2, 256, 4, 1, 1, 1, 0, 0, 1, 1), {1025, 1500}},
      {{{"k", 4096}, {"n", 272}, {"bits", 4}, {"zero", "sym"}, {"bias", "yes"}, {"act", "relu"}},
       wgmma(2, 128, 4, 1, 1, 1, 0, 1, 1, 1), {129, 256}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 2, 1, 1, 0, 1, 0, 1), {65, 100}},
      {{{"k", 2048}, {"n", 512}, {"bits", 8}, {"zero", "sym"}, {"residual", "yes"}}, wgmma(2, 64, 3, 1, 1, 1, 1, 2, 0, 1),
       {129, 256}},
      {{{"k", 768}, {"n", 128}, {"bits", 4}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 32}},
       wgmma(2, 256, 3, 1, 1, 1, 0, 0, 1, 1), {257, 512}},
      // x by the tensor copy engine: rows past M and a stage past k (5 chunks in stages of 2) arrive as
      // zeros; the 1024 bucket's loop over M; the stream schedule; bf16; A through shared memory
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}}, wgmma(2, 256, 4, 1, 1, 1, 0, 0, 1, 1, 1), {1025, 1500}},
      {{{"k", 4096}, {"n", 272}, {"bits", 4}, {"zero", "sym"}, {"bias", "yes"}, {"act", "relu"}},
       wgmma(2, 128, 4, 1, 1, 1, 0, 1, 1, 1, 1), {129, 256}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 2, 1, 1, 1, 1, 0, 1, 1), {65, 100}},
      {{{"k", 768}, {"n", 128}, {"bits", 4}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 32}},
       wgmma(2, 256, 3, 1, 1, 1, 0, 0, 1, 1, 1), {257, 300}},
      // two warp-specialised blocks per SM (each splitting its half of the registers)
      {{{"k", 4096}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"act", "relu"}}, wgmma(2, 64, 4, 1, 1, 1, 0, 2, 1, 1, 1),
       {65, 100}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 128, 3, 1, 1, 1, 1, 2, 0, 1, 1), {129, 200}},
      // y through shared memory: the stream schedule's completed and whole tiles with bias and relu6,
      // rows past M and a block past n (272 = 2 × 128 + 16); the 1024 bucket's loop with x permuted;
      // bf16 without ws; two blocks per SM; A through shared memory beside the staging
      {{{"k", 4096}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"bias", "yes"}, {"act", "relu6"}},
       wgmma(2, 128, 4, 1, 1, 1, 0, 1, 1, 1, 1, 1), {129, 200}},
      {{{"k", 768}, {"n", 128}, {"bits", 8}, {"zero", "sym"}, {"bias", "yes"}}, wgmma(2, 256, 4, 1, 1, 1, 0, 0, 0, 1, 0, 1),
       {1025, 1500}},
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"bias", "yes"}},
       wgmma(2, 128, 4, 2, 1, 0, 0, 0, 1, 0, 0, 1), {129, 200}},
      {{{"k", 4096}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"act", "relu"}},
       wgmma(1, 64, 4, 1, 1, 1, 0, 2, 1, 1, 1, 1), {65, 100}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 2, 1, 1, 1, 1, 0, 1, 1, 1), {65, 100}},
      // the weights by the tensor copy engine: a block past n (its tiles past 272 arrive as zeros), a
      // chunk past k (5 chunks in stages of 2, a box wholly outside), 3, 8 and 2 bits (boxes of 96, 256
      // and 64 words; 8 bits in one warpgroup with integer zeros pads each chunk to 128 bytes), g = 32,
      // the stream schedule and the 1024 bucket's loop, two blocks per SM
      {{{"k", 4096}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"bias", "yes"}, {"act", "relu6"}},
       wgmma(2, 128, 4, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1), {129, 200}},
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64}},
       wgmma(1, 64, 3, 2, 1, 1, 1, 1, 0, 1, 1, 0, 1), {65, 100}},
      {{{"k", 768}, {"n", 112}, {"bits", 8}, {"zero", "int"}, {"residual", "yes"}},
       wgmma(1, 256, 4, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1), {1025, 1500}},
      {{{"k", 768}, {"n", 128}, {"bits", 4}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 32}},
       wgmma(2, 256, 3, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1), {257, 300}},
      {{{"k", 1024}, {"n", 272}, {"bits", 2}, {"zero", "int"}, {"act", "relu"}},
       wgmma(1, 64, 4, 1, 1, 1, 1, 2, 0, 1, 1, 1, 1), {65, 100}},
      // symmetric weights: scales' map only, no zeros' (three maps)
      {{{"k", 4096}, {"n", 272}, {"bits", 4}, {"zero", "sym"}, {"bias", "yes"}},
       wgmma(2, 128, 4, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1), {129, 200}},
      // the stream schedule with more tiles than blocks (256 at M = 512, 160 at M = 300, for 132 or
      // more SMs): runs of one to three pieces, the head and tail of split tiles around whole ones;
      // warp-specialised (the parts through the ring) and not (through L2)
      {{{"k", 512}, {"n", 2048}, {"bits", 4}, {"zero", "int"}}, wgmma(1, 64, 3, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1),
       {300, 512}},
      {{{"k", 256}, {"n", 4096}, {"bits", 4}, {"zero", "sym"}, {"bias", "yes"}}, wgmma(2, 64, 3, 1, 1, 1, 0, 1, 1),
       {257, 512}},
      // the stream schedule in the open 1024 bucket: balanced over the output tiles of up to 8192 rows
      // of x (every tile split at M = 1024 and 1500), whole tiles round robin past them (M = 8300: one
      // tile a block, some with none; M = 8250 at 64 rows: 387 tiles, two or three a block), ws or not
      {{{"k", 512}, {"n", 256}, {"bits", 4}, {"zero", "int"}}, wgmma(2, 256, 4, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1),
       {1024, 1500, 8300}},
      {{{"k", 256}, {"n", 272}, {"bits", 4}, {"zero", "sym"}, {"bias", "yes"}}, wgmma(2, 64, 3, 1, 1, 1, 0, 1, 1),
       {1025, 8250}},
      {{{"k", 256}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"act", "relu"}},
       wgmma(2, 64, 4, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1), {1025, 8250}},
      // a stage's two chunks sharing their group (g >= 128 under tma_w and a_quad: one box of scales and
      // zeros a stage, read for both chunks)
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"bias", "yes"}},
       wgmma(2, 64, 4, 2, 1, 1, 0, 1, 1, 1, 1, 1, 1), {65, 100}},
      // 4 bits with x permuted by the warp-specialised producer (no trade), 64 and 128 rows; and with
      // the weights, scales and zeros by the tensor copy engine beside x's 4-byte copies (tma_w without
      // tma_x), at 4 and 8 bits
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"bias", "yes"}}, wgmma(2, 64, 4, 2, 1, 1, 0, 1, 0, 1),
       {65, 100}},
      {{{"k", 320}, {"n", 80}, {"bits", 4}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 32}},
       wgmma(1, 128, 3, 1, 1, 1, 0, 0, 0, 1, 0, 1), {129, 200}},
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}, {"bias", "yes"}},
       wgmma(2, 64, 4, 2, 1, 1, 0, 1, 0, 1, 0, 0, 1), {65, 100}},
      {{{"k", 768}, {"n", 112}, {"bits", 8}, {"zero", "int"}, {"residual", "yes"}},
       wgmma(1, 128, 4, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1), {129, 200}},
  };
  run_inside_bucket(cases);
}

TEST_CASE("wq_gemm cublas family: dequantise, then cuBLAS; M inside the bucket and past 1024 (typed API)", "[gpu]") {
  if (const std::string why = runtime::dense_gemm_unavailable(nullptr); !why.empty()) {
    WARN("not run: " << why);
    return;
  }
  const auto dense = [](int warps, int tiles) {
    return nlohmann::json{{"family", "cublas"}, {"warps", warps}, {"tiles", tiles}};
  };
  const BucketCase cases[] = {
      // y straight from cuBLAS; tiles past the grid's last full block (272 rows of n: 17 × 16 tiles of 16 × 64)
      {{{"k", 1024}, {"n", 272}, {"bits", 4}, {"zero", "int"}}, dense(4, 4), {100, 128}},
      // the residual alone, added by the GEMM (β = 1 over y holding it); 2 bits, g = 32
      {{{"k", 768}, {"n", 128}, {"bits", 2}, {"zero", "int"}, {"g", 32}, {"residual", "yes"}}, dense(8, 1), {5, 8}},
      // the fp32 sums and the epilogue kernel: 3 bits, float zeros, bf16, a bias and relu
      {{{"k", 320}, {"n", 80}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "bf16"}, {"g", 64},
        {"bias", "yes"}, {"act", "relu"}},
       dense(4, 1), {65, 100}},
      // the open bucket: slabs of 1024 rows (three at M = 2100), every epilogue term, g = k
      {{{"k", 512}, {"n", 112}, {"bits", 8}, {"zero", "sym"}, {"g", 512}, {"bias", "yes"}, {"act", "relu6"},
        {"residual", "yes"}},
       dense(8, 4), {1025, 2100}},
  };
  run_inside_bucket(cases);
  // y += W·h in place (residual = y), through the GEMM's β and through the epilogue.
  test::TempDir dir;
  const nlohmann::json residual_only = {{"k", 768}, {"n", 128}, {"residual", "yes"}};
  const nlohmann::json with_bias = {{"k", 768}, {"n", 128}, {"residual", "yes"}, {"bias", "yes"}};
  for (const auto& [params, rows] : {std::pair{residual_only, 8}, std::pair{with_bias, 300}}) {
    const std::string db = dir.file("in_place_" + std::to_string(rows) + ".db");
    cache::Store store(db);
    set_cache_path(db);
    nlohmann::json p = params;
    p["m"] = codegen::wq_gemm_bucket(rows);
    tuner::TuneOptions opt;
    opt.seed = fresh_seed();
    opt.only_configs = {dense(4, 1)};
    REQUIRE(tuner::tune(codegen::make_spec("wq_gemm", p), store, opt).best.config == dense(4, 1));
    check_wq_gemm(params, rows, /*in_place=*/true);
  }
}

TEST_CASE("wq_gemm small-M kernels: M inside the bucket, rows past M never stored (typed API)", "[gpu]") {
  // The tuner verifies at the bucket's M. Rows of x past M are read as a
  // copy of row M - 1 by the register pipeline and x_regs (load_x), left
  // uncopied and read as zeros by the ring; either way their columns of the
  // product are never stored.
  const auto mma = [](int warps, int split, int tiles, int mtiles, int unroll, int stages) {
    return nlohmann::json{{"warps", warps}, {"split_k", split}, {"tiles", tiles}, {"mtiles", mtiles}, {"unroll", unroll},
                          {"stages", stages}};
  };
  auto with = [](nlohmann::json c, const char* key, int v) {
    c[key] = v;
    return c;
  };
  const nlohmann::json main_shape = {{"k", 1024}, {"n", 528}, {"bits", 4}, {"zero", "int"}};
  const BucketCase cases[] = {
      {main_shape, with(with(mma(4, 4, 2, 2, 1, 4), "x_regs", 1), "spread", 1), {9, 13}},
      {main_shape, with(mma(8, 8, 2, 2, 1, 4), "x_regs", 1), {15}},
      {main_shape, mma(8, 8, 2, 1, 1, 3), {5, 7}},
      {main_shape, with(mma(4, 4, 2, 2, 2, 0), "zero_after", 1), {11}},
      {{{"k", 512}, {"n", 96}, {"bits", 3}, {"zero", "float"}, {"scales", "bf16"}, {"x", "fp32"}, {"g", 64}},
       with(mma(4, 2, 2, 1, 1, 4), "x_regs", 1), {3}},
      {{{"k", 512}, {"n", 96}, {"bits", 8}, {"zero", "sym"}, {"x", "bf16"}, {"bias", "yes"}, {"act", "relu"}},
       mma(4, 4, 1, 2, 3, 0), {10, 14}},
  };
  run_inside_bucket(cases);
}

namespace {

// Runs fused_ffn on quantized weights through the typed API on fresh random
// inputs (output poisoned first) and checks it against the float64 reference.
void check_fused_native(const std::string& shape) {
  const uint64_t seed = fresh_seed();
  const auto spec = codegen::parse_spec("fused_ffn", shape + ",weights=native");
  INFO(spec.label() << " seed " << seed);
  auto work = tuner::make_workload(spec, seed, 0);
  work->poison_output(nullptr);
  void** a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<void*>(*static_cast<CUdeviceptr*>(a[i])); };
  QuantFfnShape s;
  s.d = static_cast<int>(spec.get_int("d")), s.h = static_cast<int>(spec.get_int("h"));
  s.m = static_cast<int>(spec.get_int("m"));
  s.bits = static_cast<int>(spec.get_int("bits")), s.g = static_cast<int>(spec.get_int("g"));
  s.zero = spec.get_str("zero"), s.scales = wq_type(spec.get_str("scales")), s.x = wq_type(spec.get_str("dtype"));
  const std::string act = spec.get_str("act");
  s.act = act == "silu" ? Activation::silu : act == "silu_lut" ? Activation::silu_lut : Activation::silu_lut_seed;
  fused_ffn(s, ptr(0), {ptr(1), ptr(2), ptr(3)}, {ptr(4), ptr(5), ptr(6)}, ptr(7));
  auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
}

}  // namespace

TEST_CASE("fused_ffn on quantized weights: every bit width, zero mode, type and M (typed API)", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("kernels.db"));
  const char* kDtype[] = {"fp16", "bf16", "fp32"};
  const char* kAct[] = {"silu", "silu", "silu_lut"};
  const char* kShapes[] = {"d=64,h=16,g=32", "d=192,h=48,g=64", "d=256,h=32,g=256", "d=128,h=80,g=128"};
  int i = 0;
  for (int bits : {2, 3, 4, 8})
    for (std::string zero : {"sym", "int", "float"})
      for (std::string scales : {"fp16", "bf16"}) {
        check_fused_native(std::string(kShapes[i % 4]) + ",m=" + std::to_string(1 + i % 8) + ",bits=" +
                           std::to_string(bits) + ",zero=" + zero + ",scales=" + scales + ",dtype=" + kDtype[i % 3] +
                           ",act=" + kAct[(i / 3) % 3]);
        ++i;
      }
  for (int m : {1, 3, 8}) check_fused_native("d=4096,h=11008,m=" + std::to_string(m));
}

TEST_CASE("fused_ffn on quantized weights: every candidate verifies (tuner); bad arguments launch nothing", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (const char* shape : {"d=1024,h=528,m=1,weights=native", "d=320,h=48,m=8,bits=3,zero=float,scales=bf16,g=64,weights=native",
                            "d=256,h=64,m=5,bits=8,dtype=fp32,zero=sym,weights=native"}) {
    auto rep = expect_every_candidate_verifies(store, codegen::parse_spec("fused_ffn", shape), /*allow_pruned=*/true, 0,
                                               /*max_pruned_percent=*/25);
    CHECK(rep.best.tuned);
  }
  set_cache_path(dir.file("api.db"));
  auto work = tuner::make_workload(codegen::parse_spec("fused_ffn", "d=256,h=64,m=2,weights=native"), fresh_seed(), 0);
  void** a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<char*>(*static_cast<CUdeviceptr*>(a[i])); };
  QuantFfnShape s;
  s.d = 256, s.h = 64, s.m = 2;
  work->poison_output(nullptr);
  CHECK_THROWS_WITH(fused_ffn(s, ptr(0), {ptr(1), ptr(2), ptr(3)}, {ptr(4) + 4, ptr(5), ptr(6)}, ptr(7)),
                    Catch::Contains("qweight3") && Catch::Contains("not aligned to 16"));
  CHECK_THROWS_WITH(fused_ffn(s, ptr(0), {ptr(1), ptr(2), nullptr}, {ptr(4), ptr(5), ptr(6)}, ptr(7)),
                    Catch::Contains("zeros1 is null"));
  s.m = 9;
  CHECK_THROWS_WITH(fused_ffn(s, ptr(0), {ptr(1), ptr(2), ptr(3)}, {ptr(4), ptr(5), ptr(6)}, ptr(7)),
                    Catch::Contains("m=9"));
  s.m = 2;
  CHECK_FALSE(work->verify(1.0).ok);  // still poisoned: nothing ran
  fused_ffn(s, ptr(0), {ptr(1), ptr(2), ptr(3)}, {ptr(4), ptr(5), ptr(6)}, ptr(7));
  auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
}

TEST_CASE("full FFN chain: fused_ffn then wq_gemm on its output, back to back, equals the synchronized run", "[gpu]") {
  // With programmatic dependent launch the second kernel starts while the
  // first runs; it must wait before reading h. h is poisoned before each run:
  // a read before the wait would show up as NaN or a different result.
  test::TempDir dir;
  set_cache_path(dir.file("kernels.db"));
  const int d = 1024, h = 2816, m = 3;
  auto ffn = tuner::make_workload(
      codegen::parse_spec("fused_ffn", "d=1024,h=2816,m=3,weights=native"), fresh_seed(), 0);
  auto w2 = tuner::make_wq_gemm_workload(codegen::parse_spec("wq_gemm", "k=2816,n=1024,m=4,residual=yes"), fresh_seed(),
                                         0, m);
  auto dev = [](void** a, int i) { return *static_cast<CUdeviceptr*>(a[i]); };
  void** fa = ffn->args(0);
  void** wa = w2->args(0);
  auto p = [](CUdeviceptr v) { return reinterpret_cast<void*>(v); };
  const CUdeviceptr hbuf = dev(fa, 7), ybuf = dev(wa, 6);
  QuantFfnShape fs;
  fs.d = d, fs.h = h, fs.m = m;
  WqGemmShape ws;
  ws.k = h, ws.n = d, ws.residual = true;
  auto run = [&](bool sync_between) {
    QJIT_CU(cuMemsetD8(hbuf, 0xff, size_t{m} * h * 2));
    QJIT_CU(cuMemsetD8(ybuf, 0xff, size_t{m} * d * 2));
    QJIT_CU(cuCtxSynchronize());
    fused_ffn(fs, p(dev(fa, 0)), {p(dev(fa, 1)), p(dev(fa, 2)), p(dev(fa, 3))}, {p(dev(fa, 4)), p(dev(fa, 5)), p(dev(fa, 6))},
              p(hbuf));
    if (sync_between) QJIT_CU(cuCtxSynchronize());
    wq_gemm(ws, m, p(hbuf), p(dev(wa, 1)), p(dev(wa, 2)), p(dev(wa, 3)), nullptr, p(dev(wa, 5)), p(ybuf));
    QJIT_CU(cuCtxSynchronize());
    std::vector<uint16_t> y(size_t{m} * d);
    QJIT_CU(cuMemcpyDtoH(y.data(), ybuf, y.size() * 2));
    return y;
  };
  const auto synchronized = run(true);
  for (int rep = 0; rep < 5; ++rep) {
    const auto chained = run(false);
    CHECK(chained == synchronized);
  }
  int finite = 0;
  for (uint16_t v : synchronized) finite += std::isfinite(half_to_float(v));
  CHECK(finite == m * d);
}

TEST_CASE("a baseline without the op's epilogue is timed, not checked", "[gpu]") {
  // With a bias, cuBLAS's dense GEMM writes a scratch y: nothing adds the bias, so it cannot match
  // the reference, and y itself stays poisoned. Bench and the tuner time it and say so, rather than
  // report the poison as its error (a relative error of ~1e150 before).
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  const auto spec = codegen::parse_spec("wq_gemm", "k=1024,n=512,m=16,bias=yes");
  const auto rep = tuner::bench(spec, store);
  REQUIRE(rep.rows.size() >= 2);
  CHECK(rep.rows[0].checked);
  CHECK(rep.rows[0].verified);
  CHECK_FALSE(rep.rows[1].checked);
  CHECK_FALSE(rep.rows[1].verified);
  CHECK(rep.rows[1].median_us > 0);
  CHECK(rep.to_json().at("rows").at(1).at("rel_error").is_null());
  CHECK(rep.table().find("timed only") != std::string::npos);

  tuner::TuneOptions opt;
  opt.only_configs = {codegen::find_op("wq_gemm").default_config(spec)};
  const auto tuned = tuner::tune(spec, store, opt);
  REQUIRE(tuned.baselines.size() == 1);
  CHECK_FALSE(tuned.baselines[0].checked);
  bool found = false;
  for (const auto& t : store.trials(tuned.best.key()))
    if (t.config.contains("baseline")) {
      found = true;
      CHECK(t.verify_error == -1);
      CHECK(t.message.rfind("timed only", 0) == 0);
    }
  CHECK(found);
}

TEST_CASE("qjit bench: the sustained timing beside the burst one", "[gpu]") {
  // Each row (qjit's kernel, untuned here, and the baselines) is also timed looped back to back;
  // the times themselves are the benchmarks' business, not this test's.
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  const auto spec = codegen::parse_spec("wq_gemm", "k=1024,n=512,m=16");
  const auto rep = tuner::bench(spec, store, 0.2);
  REQUIRE(rep.rows.size() >= 2);  // qjit and cuBLAS fp16 at least
  for (const auto& r : rep.rows) {
    INFO(r.name);
    CHECK(r.verified);
    CHECK(r.median_us > 0);
    CHECK(r.sustained_us > 0);
  }
  const auto j = rep.to_json();
  CHECK(j.at("sustain_s").get<double>() == 0.2);
  CHECK(j.at("rows").at(1).at("sustained_speedup_of_qjit").get<double>() > 0);
  CHECK(rep.table().find("sustained us") != std::string::npos);
  const auto burst = tuner::bench(spec, store);
  CHECK(burst.rows.at(0).sustained_us == 0);
  CHECK_FALSE(burst.to_json().contains("sustain_s"));
  CHECK(burst.table().find("sustained") == std::string::npos);
}
