// GPU tests: run only through `qjit_tests "[gpu]"`, which exits 77 (skipped)
// without a device. Inputs are fresh random data from the tuner's workload;
// results are checked against the float64 CPU reference with the stated
// tolerance of each output type (tuner/reference/fused_ffn.cpp).
#include <catch2/catch.hpp>
#include <sqlite3.h>
#include <cmath>
#include <cstring>
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
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"
#include "tuner/bench.h"
#include "tuner/reference/fp_lut.h"
#include "tuner/timing.h"
#include "tuner/tuner.h"
#include "tuner/workload.h"

using namespace qjit;
using test::expect_every_candidate_verifies;
using test::fresh_seed;
using test::wq_type;

namespace {

// A dense fused_ffn workload's arguments (FusedFfnArgs, packed), as plain device pointers.
struct Pointers {
  void *x, *w1, *w3, *y;
};
Pointers pointers(tuner::Workload& w) {
  const ArgPack& a = w.args(0);
  auto p = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
  return {p(0), p(1), p(4), p(7)};  // x, w1, (scales1, zeros1), w3, (scales3, zeros3), y
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
  // The same call with its arguments in a struct (the form Python passes).
  work->poison_output(nullptr);
  const qjit_dense_ffn_args a{2048, 512, 2, "fp16", nullptr, p.x, p.w1, p.w3, p.y};
  REQUIRE(qjit_dense_ffn(&a, nullptr) == QJIT_OK);
  v = work->verify(1.0);
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

TEST_CASE("a read-only cache serves its kernels, and a miss runs the default without writing", "[gpu]") {
  test::TempDir dir;
  const std::string db = dir.file("kernels.db");
  auto cached = codegen::make_spec("fused_ffn", {{"d", 512}, {"h", 100}, {"m", 1}});
  {
    cache::Store store(db);
    store.put(runtime::build_record(cached, codegen::find_op("fused_ffn").default_config(cached), /*tuned=*/true));
  }
  setenv("QJIT_CACHE_READ_ONLY", "1", 1);
  set_cache_path(db);  // reopens the store: read-only now
  check_fused_ffn({512, 100, 1, DType::fp16});   // a hit
  check_fused_ffn({256, 64, 2, DType::bf16});    // a miss: compiled, run, not stored
  unsetenv("QJIT_CACHE_READ_ONLY");
  set_cache_path(db);
  cache::Store store(db);
  CHECK(store.list().size() == 1);
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
  opt.exhaustive = true;
  const auto first = tuner::tune(spec, store, opt);
  for (const auto& t : first.trials) CHECK(t.status != cache::TrialStatus::unfinished);  // every placeholder replaced
  // The fastest candidate (not a library baseline): a run that died on it must not pick it.
  const auto fastest = std::find_if(first.trials.begin(), first.trials.end(),
                                    [](const cache::TrialRecord& t) { return !t.config.contains("baseline"); });
  REQUIRE(fastest != first.trials.end());
  REQUIRE(first.candidates_total >= 2);
  cache::TrialRecord died = *fastest;
  died.status = cache::TrialStatus::unfinished;
  died.message = cache::kUnfinishedTrialMessage;
  died.median_us = 0;
  store.put_trials({died});
  const auto again = tuner::tune(spec, store, opt);
  CHECK(again.measured_now == 0);
  CHECK(again.skipped_known == first.candidates_total);
  CHECK(again.best.config != died.config);
  const auto kept = std::find_if(again.trials.begin(), again.trials.end(),
                                 [&](const cache::TrialRecord& t) { return t.config == died.config; });
  REQUIRE(kept != again.trials.end());
  CHECK(kept->status == cache::TrialStatus::unfinished);
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
  // The result in the other 16-bit type (out=): one rounding, bit-exact too.
  for (std::string layout : {"awq", "gptq"})
    for (auto [scales, out] : {std::pair{"fp16", "bf16"}, std::pair{"bf16", "fp16"}}) {
      auto spec = codegen::make_spec("awq_dequant", {{"k", 384}, {"n", 40}, {"g", 64}, {"layout", layout},
                                                     {"scales", scales}, {"out", out}});
      expect_every_candidate_verifies(store, spec, /*allow_pruned=*/false);
    }
  // Large shapes with every group size, through the tuner's verification.
  for (int g : {32, 64, 128, 4096}) {
    auto spec = codegen::make_spec("awq_dequant", {{"k", 4096}, {"n", 1024}, {"g", g}});
    expect_every_candidate_verifies(store, spec, /*allow_pruned=*/false, /*budget_candidates=*/3);
  }
}

TEST_CASE("awq_dequant: the typed API, bit-exact; bad pointers launch and cache nothing", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("api.db"));
  struct Case {
    std::string layout, zero, scales, out;
    int k, n, g;
  };
  for (const Case& c : {Case{"awq", "int", "fp16", "scales", 384, 40, 32}, Case{"gptq", "sym", "bf16", "fp16", 512, 24, 512},
                        Case{"gptq", "int", "fp16", "scales", 4096, 1024, 128}}) {
    const uint64_t seed = fresh_seed();
    auto spec = codegen::make_spec("awq_dequant", {{"k", c.k}, {"n", c.n}, {"g", c.g}, {"layout", c.layout},
                                                   {"zero", c.zero}, {"scales", c.scales}, {"out", c.out}});
    INFO(spec.label() << " seed " << seed);
    auto work = tuner::make_workload(spec, seed, 0);
    const ArgPack& a = work->args(0);
    auto ptr = [&](int i) { return reinterpret_cast<char*>(a.values[i].ptr); };
    const AwqDequantShape s{c.k, c.n, c.g, c.layout, c.zero == "sym", wq_type(c.scales), c.out};
    const std::string key = runtime::fingerprint(spec).key();
    work->poison_output(nullptr);
    CHECK_THROWS_WITH(awq_dequant(s, ptr(0), ptr(1), ptr(2) + 2, ptr(3)),
                      Catch::Contains("scales") && Catch::Contains("not aligned to 16"));
    CHECK_THROWS_WITH(awq_dequant(s, nullptr, ptr(1), ptr(2), ptr(3)), Catch::Contains("qweight is null"));
    if (c.zero == "int") CHECK_THROWS_WITH(awq_dequant(s, ptr(0), nullptr, ptr(2), ptr(3)), Catch::Contains("qzeros is null"));
    CHECK_FALSE(work->verify(1.0).ok);  // still poisoned: nothing ran
    CHECK_FALSE(cache::Store(dir.file("api.db")).lookup(key));  // nothing cached
    awq_dequant(s, ptr(0), c.zero == "sym" ? nullptr : ptr(1), ptr(2), ptr(3));
    auto v = work->verify(0.0);
    INFO(v.message);
    CHECK(v.ok);
    CHECK(cache::Store(dir.file("api.db")).lookup(key));
    // The same through the C API's struct (strings as the typed shape's).
    work->poison_output(nullptr);
    qjit_awq_dequant_args ca{};
    ca.k = c.k, ca.n = c.n, ca.g = c.g, ca.layout = c.layout.c_str(), ca.symmetric = c.zero == "sym";
    ca.scales_dtype = c.scales.c_str(), ca.out_dtype = c.out.c_str();
    ca.qweight = ptr(0), ca.qzeros = c.zero == "sym" ? nullptr : ptr(1), ca.scales = ptr(2), ca.out = ptr(3);
    REQUIRE(qjit_awq_dequant(&ca, nullptr) == QJIT_OK);
    v = work->verify(0.0);
    INFO(v.message);
    CHECK(v.ok);
    ca.scales = ptr(2) + 2;
    CHECK(qjit_awq_dequant(&ca, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(qjit_last_error(), Catch::Contains("not aligned to 16"));
  }
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
  const ArgPack& a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
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
  const ArgPack& a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<char*>(a.values[i].ptr); };
  QuantFfnShape s;
  s.d = 256, s.h = 64, s.m = 2;
  work->poison_output(nullptr);
  CHECK_THROWS_WITH(fused_ffn(s, ptr(0), {ptr(1), ptr(2), ptr(3)}, {ptr(4) + 4, ptr(5), ptr(6)}, ptr(7)),
                    Catch::Contains("w3") && Catch::Contains("not aligned to 16"));
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
  auto dev = [](const ArgPack& a, int i) { return CUdeviceptr{a.values[i].ptr}; };
  const ArgPack& fa = ffn->args(0);
  const ArgPack& wa = w2->args(0);
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
