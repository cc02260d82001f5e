// GPU tests of wq_gemm: run only through `qjit_tests "[gpu]"`, which exits 77
// (skipped) without a device. Inputs are fresh random data from the tuner's
// workload, checked against the float64 CPU reference (tuner/reference/wq_gemm.cpp)
// at the tolerance of the output type.
#include <catch2/catch.hpp>
#include "codegen/ops/wq_gemm.h"
#include "codegen/registry.h"
#include "qjit/qjit.h"
#include "qjit/qjit_c.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/ops/run.h"
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"
#include "tuner/tuner.h"
#include "tuner/workload.h"

using namespace qjit;
using test::expect_every_candidate_verifies;
using test::fresh_seed;
using test::wq_type;

namespace {

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
  const ArgPack& a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
  WqGemmShape s;
  s.k = static_cast<int>(spec.get_int("k")), s.n = static_cast<int>(spec.get_int("n"));
  s.bits = static_cast<int>(spec.get_int("bits")), s.g = static_cast<int>(spec.get_int("g"));
  s.zero = spec.get_str("zero"), s.scales = wq_type(spec.get_str("scales")), s.x = wq_type(spec.get_str("x"));
  s.bias = spec.get_str("bias") == "yes", s.act = spec.get_str("act"), s.residual = spec.get_str("residual") == "yes";
  void* residual = ptr(5);
  if (in_place) {
    REQUIRE(s.residual);
    const size_t bytes = static_cast<size_t>(rows) * s.n * (s.x == DType::fp32 ? 4 : 2);
    QJIT_CU(cuMemcpyDtoD(a.values[6].ptr, a.values[5].ptr, bytes));
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
  const ArgPack& a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<char*>(a.values[i].ptr); };
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
  // ... and nothing cached: the pointers are checked before the cold cache's default is compiled.
  const std::string key = runtime::fingerprint(spec).key();
  CHECK_FALSE(cache::Store(dir.file("api.db")).lookup(key));
  wq_gemm(s, 3, ptr(0), ptr(1), ptr(2), ptr(3), nullptr, nullptr, ptr(6));
  auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
  CHECK(cache::Store(dir.file("api.db")).lookup(key));
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
        for (int i = 0; i < 5; ++i) runtime::run_checked(runtime::run_wq_gemm, kernel, work->args(0), streams[0]);
        QJIT_CU(cuStreamSynchronize(streams[0]));
        const auto v = work->verify(1.0);
        INFO("round " << round << ": " << v.message);
        CHECK(v.ok);
      }
      // Two streams at once, each on its own workspace (they write the same y).
      work->poison_output(nullptr);
      QJIT_CU(cuCtxSynchronize());
      for (int i = 0; i < 6; ++i) runtime::run_checked(runtime::run_wq_gemm, kernel, work->args(0), streams[i % 2]);
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
    nlohmann::json p = c.params;
    p["m"] = codegen::wq_gemm_bucket(c.rows.front());
    test::tune_one_config(dir.file("kernels_" + std::to_string(n++) + ".db"), codegen::make_spec("wq_gemm", p), c.config);
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
  if (const std::string why = runtime::cublas_unavailable(nullptr); !why.empty()) {
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

TEST_CASE("wq_gemm: the C API, its strings and flags, and errors that launch nothing", "[gpu]") {
  test::TempDir dir;
  REQUIRE(qjit_set_cache_path(dir.file("c.db").c_str()) == QJIT_OK);
  for (const auto& params : {nlohmann::json{{"k", 256}, {"n", 64}, {"g", 64}, {"bits", 4}, {"zero", "int"}},
                             nlohmann::json{{"k", 192}, {"n", 48}, {"g", 64}, {"bits", 8}, {"zero", "sym"}, {"x", "bf16"},
                                            {"scales", "bf16"}, {"bias", "yes"}, {"act", "relu"}}}) {
    const int rows = 5;
    nlohmann::json p = params;
    p["m"] = codegen::wq_gemm_bucket(rows);
    const auto spec = codegen::make_spec("wq_gemm", p);
    INFO(spec.label());
    auto work = tuner::make_wq_gemm_workload(spec, fresh_seed(), 0, rows);
    work->poison_output(nullptr);
    const ArgPack& a = work->args(0);
    auto ptr = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
    const std::string zero = spec.get_str("zero"), scales = spec.get_str("scales"), x = spec.get_str("x"),
                      act = spec.get_str("act");
    qjit_wq_gemm_args c{};
    c.k = static_cast<int>(spec.get_int("k")), c.n = static_cast<int>(spec.get_int("n"));
    c.bits = static_cast<int>(spec.get_int("bits")), c.g = static_cast<int>(spec.get_int("g"));
    c.zero = zero.c_str(), c.scales_dtype = scales.c_str(), c.x_dtype = x.c_str(), c.act = act.c_str();
    c.bias = spec.get_str("bias") == "yes";
    c.x = ptr(0), c.qweight = ptr(1), c.scales = ptr(2), c.zeros = ptr(3), c.bias_ptr = ptr(4), c.y = ptr(6), c.m = rows;
    REQUIRE(qjit_wq_gemm(&c, nullptr) == QJIT_OK);
    CHECK(std::string(qjit_last_error()).empty());
    auto v = work->verify(1.0);
    INFO(v.message);
    CHECK(v.ok);
    work->poison_output(nullptr);
    qjit_wq_gemm_args bad = c;
    bad.qweight = nullptr;
    CHECK(qjit_wq_gemm(&bad, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(qjit_last_error(), Catch::Contains("qweight is null"));
    bad = c;
    bad.k = c.k + 1;
    CHECK(qjit_wq_gemm(&bad, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
    CHECK_FALSE(work->verify(1.0).ok);  // still poisoned: nothing ran
  }
}
