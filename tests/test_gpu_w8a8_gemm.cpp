// w8a8_gemm on the GPU: the quantization kernel equals the CPU quantizer
// bit for bit (codes, scales, offsets, sums) on edge-case rows; every
// candidate of a spread of specs verifies (the tuner checks each against the
// float64 reference within w8a8_tolerance; from m = 128 on compute
// capability 9.0 that includes the wgmma family); the wgmma family at M
// and N that are not multiples of its tile, int8 and e4m3; the typed API,
// including a call of more rows than the top bucket (run chunk by chunk),
// and the C API. format=e4m3 (sm_89+; refused on older GPUs) the same: its
// quantization kernel bit for bit against quantize_fp8_rows, every
// candidate within w8a8_fp8_tolerance (on compute capability 9.0 the
// cuBLASLt family, and from m = 128 the e4m3 wgmma kernel among them), the
// typed and C APIs; the cuBLASLt family at row counts off its bucket.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "cache/store.h"
#include "codegen/ops/w8a8_gemm.h"
#include "codegen/numeric.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "qjit/qjit.h"
#include "qjit/qjit_c.h"
#include "runtime/cublaslt.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"
#include "tuner/reference/w8a8_fp8.h"
#include "tuner/reference/w8a8_gemm.h"
#include "tuner/timing.h"
#include "tuner/tuner.h"
#include "tuner/workload.h"

using namespace qjit;

namespace {

// x [m][k] in float32 with the rows that stress QuantA: constant (the
// degenerate |scale| ≤ 1e-5 block), zeros, a spread of 1e-30 (subnormal
// scale), huge values, half-way values (ties of the rounding), random.
std::vector<float> edge_rows(int64_t m, int64_t k, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(m * k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k; ++i) {
      float v = u(rng);
      switch (r % 8) {
        case 0: v = 0.25f; break;
        case 1: v = 0.0f; break;
        case 2: v = 1.0f + 1e-30f * static_cast<float>(i % 5); break;
        case 3: v *= 6.0e4f; break;
        case 4: v = static_cast<float>(static_cast<int>(i % 255) - 128) + 0.5f; break;  // ties after scaling
        case 5: v = (i % 2) ? 1e-6f : -1e-6f; break;  // spread 2e-6: scale under 1e-5
        default: v *= std::pow(10.0f, static_cast<float>(r % 5) - 2.0f);
      }
      x[r * k + i] = v;
    }
  return x;
}

// The workspace after spec's quantization kernel (its default config's
// module) ran on x (raw elements of the spec's x type), `rows` rows.
std::vector<unsigned char> quantize_on_gpu(const codegen::OpSpec& spec, const void* x, size_t x_bytes, int rows) {
  const auto& op = codegen::find_op("w8a8_gemm");
  const auto r = codegen::compile(codegen::generate_source(spec, op.default_config(spec)), runtime::current_device().arch);
  REQUIRE(r.ok);
  CUmodule module;
  CUfunction quant;
  QJIT_CU(cuModuleLoadData(&module, r.cubin.data()));
  QJIT_CU(cuModuleGetFunction(&quant, module, "qjit_w8a8_quant_a"));
  const int64_t k = spec.get_int("k"), blocks = k / spec.get_int("block");
  const auto ws = codegen::w8a8_workspace(spec.get_int("m"), k, spec.get_int("block"));
  tuner::DeviceBuffer dx(x_bytes), dws(ws.total);
  dx.upload(x, x_bytes);
  CUdeviceptr px = dx.ptr(), pc = dws.ptr() + ws.codes, ps = dws.ptr() + ws.scale, po = dws.ptr() + ws.offset,
              pz = dws.ptr() + ws.sum;
  void* params[] = {&px, &rows, &pc, &ps, &po, &pz};
  QJIT_CU(cuLaunchKernel(quant, static_cast<unsigned>((rows * blocks + 7) / 8), 1, 1, 256, 1, 1, 0, nullptr, params,
                         nullptr));
  QJIT_CU(cuCtxSynchronize());
  std::vector<unsigned char> all(ws.total);
  dws.download(all.data(), all.size());
  QJIT_CU(cuModuleUnload(module));
  return all;
}

// qjit_w8a8_gemm(c) refused with a message holding `refusal`; then, c.quant_a
// NULL, run on poisoned output y and checked by check_y.
void c_api_refused_then_run(qjit_w8a8_gemm_args c, const char* refusal, const tuner::DeviceBuffer& y,
                            const std::function<void()>& check_y) {
  CHECK(qjit_w8a8_gemm(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(qjit_last_error(), Catch::Contains(refusal));
  c.quant_a = nullptr;
  QJIT_CU(cuMemsetD8(y.ptr(), 0xff, y.bytes()));
  REQUIRE(qjit_w8a8_gemm(&c, nullptr) == QJIT_OK);
  QJIT_CU(cuCtxSynchronize());
  check_y();
}

// Block b's parameter of row `row` in a workspace array starting at byte `at`.
template <typename T>
T param_at(const std::vector<unsigned char>& ws, size_t at, int64_t padded_rows, int64_t b, int64_t row) {
  T v;
  std::memcpy(&v, ws.data() + at + static_cast<size_t>(b * padded_rows + row) * 4, 4);
  return v;
}

// Each case's config alone is tuned (and verified) at the bucket of its first M into its own cache,
// then the cached kernel runs through the typed API at every M of the case (w8a8_gemm's argument
// order: x, wq, w_scale, w_offset, w_sum, bias, y) and the output is verified.
struct ConfigCase {
  const char* shape;  // without m
  nlohmann::json config;
  std::vector<int> rows;
};

void run_config_cases(const std::vector<ConfigCase>& cases) {
  test::TempDir dir;
  int index = 0;
  for (const ConfigCase& c : cases) {
    const auto spec = codegen::parse_spec(
        "w8a8_gemm", std::string(c.shape) + ",m=" + std::to_string(codegen::w8a8_gemm_bucket(c.rows.front())));
    INFO(spec.label() << " " << c.config.dump());
    // A case whose config does not verify is reported and the next case runs.
    bool tuned = false;
    CHECK_NOTHROW((test::tune_one_config(dir.file("kernels_" + std::to_string(index++) + ".db"), spec, c.config),
                   tuned = true));
    if (!tuned) continue;
    for (int rows : c.rows) {
      const uint64_t seed = test::fresh_seed();
      INFO("M=" << rows << " seed " << seed);
      auto work = tuner::make_w8a8_gemm_workload(spec, seed, 0, rows);
      work->poison_output(nullptr);
      QJIT_CU(cuCtxSynchronize());
      const ArgPack& a = work->args(0);
      auto ptr = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
      W8a8GemmShape shape;
      shape.k = static_cast<int>(spec.get_int("k")), shape.n = static_cast<int>(spec.get_int("n"));
      shape.block = static_cast<int>(spec.get_int("block"));
      const std::string xt = spec.get_str("x");
      shape.x = xt == "fp32" ? DType::fp32 : xt == "bf16" ? DType::bf16 : DType::fp16;
      shape.format = spec.get_str("format");
      if (shape.format != "e4m3") shape.quant_a = spec.get_str("quant_a"), shape.quant_w = spec.get_str("quant_w");
      shape.bias = spec.get_str("bias") == "yes", shape.act = spec.get_str("act");
      w8a8_gemm(shape, {ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), ptr(5), ptr(6), rows});
      const auto v = work->verify(1.0);
      INFO(v.message);
      CHECK(v.ok);
    }
  }
}

}  // namespace

TEST_CASE("w8a8_gemm: the quantization kernel equals the CPU bit for bit", "[gpu]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (const char* rule : {"offset", "symmetric"})
    for (const auto& [k, block] : {std::pair{512, 128}, std::pair{96, 48}, std::pair{1024, 512}, std::pair{64, 32}}) {
      const int m = 16;
      const std::string s = "k=" + std::to_string(k) + ",n=16,m=16,x=fp32,block=" + std::to_string(block) +
                            ",quant_a=" + rule;
      INFO(s);
      const auto spec = codegen::parse_spec("w8a8_gemm", s);
      const auto x = edge_rows(m, k, rng);
      const auto want = tuner::quantize_activations(x, m, k, block, std::string(rule) == "offset"
                                                                         ? tuner::BlockRule::offset
                                                                         : tuner::BlockRule::symmetric);
      const auto ws = codegen::w8a8_workspace(m, k, block);
      const auto all = quantize_on_gpu(spec, x.data(), x.size() * 4, m);
      const int blocks = k / block;
      std::vector<int8_t> codes(m * k);
      std::memcpy(codes.data(), all.data() + ws.codes, codes.size());
      CHECK(codes == want.q);
      const int64_t padded = (ws.offset - ws.scale) / 4 / blocks;
      for (int row = 0; row < m; ++row)
        for (int b = 0; b < blocks; ++b) {
          INFO("row " << row << " block " << b);
          const float sc = param_at<float>(all, ws.scale, padded, b, row), of = param_at<float>(all, ws.offset, padded, b, row);
          CHECK(std::memcmp(&sc, &want.scale[row * blocks + b], 4) == 0);
          if (std::string(rule) == "offset") CHECK(std::memcmp(&of, &want.offset[row * blocks + b], 4) == 0);
          CHECK(param_at<int32_t>(all, ws.sum, padded, b, row) == want.sum[row * blocks + b]);
        }
    }
}

TEST_CASE("w8a8_gemm: every candidate verifies (tuner)", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (const char* s : {"k=512,n=256,m=1,block=128", "k=1024,n=192,m=16,block=64,x=bf16,quant_a=symmetric,bias=yes",
                        "k=768,n=128,m=64,block=256,x=fp32,quant_w=symmetric,act=relu6,bias=yes",
                        "k=2048,n=512,m=256,block=128,quant_a=symmetric,quant_w=symmetric,act=relu",
                        "k=1024,n=256,m=128,block=32", "k=96,n=40,m=8,block=48,bias=yes",
                        // the wgmma family's (sm_90): n not a multiple of its 128 columns, 2 stages a block
                        "k=1024,n=1008,m=512,block=128,x=bf16,bias=yes,act=relu6",
                        "k=1536,n=400,m=256,block=256,x=fp32,quant_w=symmetric"}) {
    INFO(s);
    test::expect_every_candidate_verifies(store, codegen::parse_spec("w8a8_gemm", s), /*allow_pruned=*/false);
  }
}

TEST_CASE("w8a8_gemm wgmma family: M and N not multiples of the tile, every form and stage count (typed API)",
          "[gpu]") {
  // (e4m3: n is a multiple of 128, so only M falls off the tile; its cases check the W tile scale of
  // each block and column tile, and x's scales per row, on partial and multi-tile grids.)
  if (runtime::current_device().arch != "sm_90") {
    WARN("not run: the wgmma family runs on compute capability 9.0 only");
    return;
  }
  // The last tile of rows partly past M (its rows of x arrive as zeros and are not stored), the last
  // tile of columns partly past n (W's rows likewise; its parameter copies cut at n), persistent
  // grids taking several tiles a block, and a call of more rows than the top bucket (two chunks, the
  // second short).
  const auto wgmma = [](int bm, int stages, int persistent) {
    return nlohmann::json{{"family", "wgmma"}, {"bm", bm}, {"stages", stages}, {"persistent", persistent}};
  };
  const auto overlapped = [&](int bm, int stages, int persistent) {
    auto c = wgmma(bm, stages, persistent);
    c["overlap"] = 1;
    return c;
  };
  run_config_cases({
      {"k=1024,n=1008,block=128,bias=yes,act=relu", wgmma(128, 4, 0), {300, 257}},
      // (bm 192 with 3 or 5 stages spills 12 bytes here, so the tuner prunes it and this test would too.)
      {"k=1536,n=400,block=256,x=bf16,quant_a=symmetric,quant_w=symmetric", wgmma(192, 4, 1), {200, 129}},
      {"k=1536,n=144,block=384,x=fp32", wgmma(128, 5, 0), {128, 100}},
      {"k=2048,n=272,block=512,quant_w=symmetric,act=relu6,bias=yes", wgmma(64, 6, 1), {1000, 513}},
      {"k=512,n=1024,block=128,x=bf16,quant_a=symmetric", wgmma(64, 4, 1), {4133}},
      {"k=1024,n=384,block=128,format=e4m3,bias=yes,act=relu", wgmma(128, 4, 0), {300, 257}},
      {"k=1536,n=256,block=128,format=e4m3,x=bf16", wgmma(192, 3, 1), {200, 129}},
      {"k=512,n=1024,block=128,format=e4m3,x=fp32,act=relu6", wgmma(64, 5, 1), {4133}},
      // overlap (bm 64): runs of 8 and of 3 blocks, blocks of two stages, e4m3, persistent grids
      {"k=1024,n=1008,block=128,bias=yes,act=relu", overlapped(64, 3, 1), {300, 257}},
      {"k=1152,n=400,block=128,x=bf16,quant_a=symmetric,quant_w=symmetric", overlapped(64, 4, 0), {200, 129}},
      {"k=1536,n=144,block=256,x=fp32", overlapped(64, 4, 1), {128, 100}},
      {"k=1024,n=384,block=128,format=e4m3,bias=yes,act=relu", overlapped(64, 3, 0), {300, 257}},
  });
}

TEST_CASE("w8a8_gemm stream family: n off the band, blocks of several pieces, split k, M off the bucket (typed API)",
          "[gpu]") {
  // Rows of W past n (bands of 64 or 128 rows over n = 1008 and 400), blocks of 256 and 512 codes (two
  // and four pieces before a promotion), 1 to 8 slices of k summed by the last block of a band (whose
  // counter must be back at 0 for the next call: each case calls twice or more), x's rows ahead in
  // registers (M <= 16) and not (M = 64).
  const auto stream = [](int warps, int tiles, int splits, int unroll) {
    return nlohmann::json{{"family", "stream"}, {"warps", warps}, {"tiles", tiles}, {"splits", splits}, {"unroll", unroll}};
  };
  const auto fused = [&](int warps, int tiles, int splits, int unroll) {
    auto c = stream(warps, tiles, splits, unroll);
    c["fuse"] = 1;
    return c;
  };
  run_config_cases({
      {"k=1024,n=1008,block=128,bias=yes,act=relu", stream(8, 1, 4, 2), {16, 9, 16}},
      {"k=1536,n=400,block=256,x=bf16,quant_a=symmetric,quant_w=symmetric", stream(4, 2, 2, 2), {8, 5}},
      {"k=4096,n=512,block=128,x=fp32", stream(4, 1, 8, 4), {1, 1}},
      {"k=2048,n=272,block=512,quant_w=symmetric,act=relu6,bias=yes", stream(8, 1, 1, 2), {64, 33}},
      // symmetric x with W's offsets: ΣA still multiplies them
      {"k=1024,n=1008,block=128,quant_a=symmetric,x=bf16,bias=yes", stream(4, 2, 2, 2), {16, 3}},
      // fuse: x quantized by each block over its slice (one kernel), blocks of one and two pieces
      {"k=1024,n=1008,block=128,bias=yes,act=relu", fused(8, 1, 4, 2), {16, 9, 16}},
      {"k=1536,n=400,block=256,x=fp32,quant_w=symmetric", fused(4, 2, 1, 2), {1, 1}},
  });
}

TEST_CASE("w8a8_gemm cublaslt family: calls of fewer rows than the bucket, one row, more than a bucket (typed API)",
          "[gpu]") {
  // cuBLASLt's 1x128 and 128x128 block scales: compute capability 9.0 (and later) with cuBLASLt 12.9+.
  if (std::stoi(runtime::current_device().identity.compute_capability) < 9) {
    WARN("not run: cuBLASLt's FP8 block scales need compute capability 9.0");
    return;
  }
  if (const std::string why = runtime::cublaslt_unavailable(); !why.empty()) {
    WARN("not run: " << why);
    return;
  }
  // x's scales are laid out [k/128][M] for each call's M (not the bucket's), so a call of fewer rows
  // than the bucket checks the layout; the heuristic's answers are kept per row count.
  const auto lt = [](int algo) { return nlohmann::json{{"family", "cublaslt"}, {"algo", algo}}; };
  run_config_cases({
      {"k=1024,n=384,block=128,format=e4m3,bias=yes,act=relu", lt(0), {300, 257, 300}},
      {"k=1536,n=256,block=128,format=e4m3,x=bf16", lt(1), {200, 129}},
      {"k=4096,n=512,block=128,format=e4m3,x=bf16,bias=yes", lt(0), {1}},
      {"k=512,n=1024,block=128,format=e4m3,x=fp32", lt(3), {4133}},
  });
}

TEST_CASE("w8a8_gemm: typed API over more rows than a bucket, and the C API", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("api.db"));
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // 4096 + 37 rows: the top bucket's plan runs twice, the second chunk 37 rows.
  const int m = 4133, k = 256, n = 64, block = 64;
  std::vector<float> x(static_cast<size_t>(m) * k), wf(n * k), bias(n);
  for (auto& v : x) v = 3.0f * u(rng);
  for (auto& v : wf) v = 0.1f * u(rng);
  for (auto& v : bias) v = u(rng);
  const auto a = tuner::quantize_activations(x, m, k, block, tuner::BlockRule::offset);
  const auto w = tuner::pack_weights(wf, n, k, block, tuner::BlockRule::offset);
  const std::vector<int64_t> rows = {0, 1, 4095, 4096, 4097, m - 1};
  const auto ref = tuner::w8a8_gemm_reference(a, w, bias, "relu", rows);
  const int blocks = k / block;
  std::vector<float> scale(blocks * n), offset(blocks * n);
  std::vector<int32_t> sum(blocks * n);
  for (int c = 0; c < n; ++c)
    for (int b = 0; b < blocks; ++b)
      scale[b * n + c] = w.scale[c * blocks + b], offset[b * n + c] = w.offset[c * blocks + b],
                  sum[b * n + c] = w.sum[c * blocks + b];
  tuner::DeviceBuffer dx(x.size() * 4), dq(w.q.size()), ds(scale.size() * 4), dof(offset.size() * 4),
      dsum(sum.size() * 4), db(bias.size() * 4), dy(static_cast<size_t>(m) * n * 4);
  dx.upload(x.data(), x.size() * 4), dq.upload(w.q.data(), w.q.size()), ds.upload(scale.data(), scale.size() * 4);
  dof.upload(offset.data(), offset.size() * 4), dsum.upload(sum.data(), sum.size() * 4);
  db.upload(bias.data(), bias.size() * 4);
  auto p = [](const tuner::DeviceBuffer& b) { return reinterpret_cast<void*>(b.ptr()); };
  W8a8GemmShape shape;
  shape.k = k, shape.n = n, shape.block = block, shape.x = DType::fp32, shape.bias = true, shape.act = "relu";
  auto check_y = [&] {
    std::vector<float> y(static_cast<size_t>(m) * n);
    dy.download(y.data(), y.size() * 4);
    for (size_t i = 0; i < ref.y.size(); ++i) {
      const int64_t r = rows[i / n], c = static_cast<int64_t>(i % n);
      INFO("y[" << r << "][" << c << "]");
      CHECK(std::fabs(y[r * n + c] - ref.y[i]) <= tuner::w8a8_tolerance(ref.magnitude[i], ref.y[i], blocks, "fp32"));
    }
  };
  CHECK_THROWS_WITH(w8a8_gemm(shape, {p(dx), p(dq), p(ds), p(dof), nullptr, p(db), p(dy), m}),
                    Catch::Contains("w_sum"));
  CHECK_THROWS_WITH(w8a8_gemm(shape, {p(dx), p(dq), p(ds), p(dof), p(dsum), nullptr, p(dy), m}),
                    Catch::Contains("bias is null"));
  QJIT_CU(cuMemsetD8(dy.ptr(), 0xff, dy.bytes()));
  w8a8_gemm(shape, {p(dx), p(dq), p(ds), p(dof), p(dsum), p(db), p(dy), m});
  QJIT_CU(cuCtxSynchronize());
  check_y();

  REQUIRE(qjit_set_cache_path(dir.file("c.db").c_str()) == QJIT_OK);
  qjit_w8a8_gemm_args c{};
  c.k = k, c.n = n, c.block = block, c.x_dtype = "fp32", c.bias = 1, c.act = "relu";
  c.x = p(dx), c.wq = p(dq), c.w_scale = p(ds), c.w_offset = p(dof), c.w_sum = p(dsum), c.bias_ptr = p(db);
  c.y = p(dy), c.m = m;
  c.quant_a = "minmax";
  c_api_refused_then_run(c, "minmax", dy, check_y);
}

namespace {

// x [m][k] for the e4m3 quantizer: per row kind, a constant, zeros and
// negative zeros, a row whose amax is 448 (scale exactly 1) and whose other
// values are midpoints between e4m3 codes (ties of the rounding), values
// 2^-20 of the block's amax (subnormal and zero codes, both signs), huge
// values, random ones at spread magnitudes.
std::vector<float> fp8_edge_rows(int64_t m, int64_t k, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto midpoint = [&] {  // halfway between two neighbouring codes below 448, either sign
    const auto c = static_cast<uint8_t>(rng() % 0x7D);
    return (tuner::e4m3_to_float(c) + tuner::e4m3_to_float(c + 1)) / 2 * (rng() % 2 ? 1.0f : -1.0f);
  };
  // Row r's element i from a draw d in [-1, 1), by r % 7.
  const std::function<float(int64_t, float)> kind[] = {
      [](int64_t, float) { return 0.375f; },
      [](int64_t i, float) { return i % 2 ? 0.0f : -0.0f; },
      [&](int64_t i, float) { return i % 128 == 0 ? 448.0f : midpoint(); },
      [](int64_t i, float d) { return i % 128 == 5 ? 3.0f : d * 0x1p-20f; },
      [](int64_t, float d) { return d * 6.0e4f; },
      [](int64_t, float d) { return d * 100.0f; },
      [](int64_t, float d) { return d * 0.01f; },
  };
  std::vector<float> x(m * k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k; ++i) x[r * k + i] = kind[r % 7](i, u(rng));
  return x;
}

bool fp8_device(const runtime::Device& dev) { return std::stoi(dev.arch.substr(3)) >= 89; }

}  // namespace

TEST_CASE("w8a8_gemm format=e4m3: the quantization kernel equals the CPU bit for bit", "[gpu]") {
  const auto& dev = runtime::current_device();
  const auto& op = codegen::find_op("w8a8_gemm");
  if (!fp8_device(dev)) {
    const auto spec = codegen::parse_spec("w8a8_gemm", "k=512,n=128,m=16,format=e4m3");
    CHECK_THROWS_WITH(op.tunable_space(spec, runtime::device_limits()), Catch::Contains("8.9 or newer"));
    CHECK_THROWS_WITH(codegen::compile(codegen::generate_source(spec, op.default_config(spec)), dev.arch),
                      Catch::Contains("needs sm_89"));
    return;
  }
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (const char* xt : {"fp32", "fp16", "bf16"}) {
    const int m = 21, k = 512, block = 128, blocks = k / block;
    const std::string s = std::string("k=512,n=128,m=32,format=e4m3,x=") + xt;
    INFO(s);
    const auto spec = codegen::parse_spec("w8a8_gemm", s);
    // x in its own type; the CPU quantizes the same values widened.
    const auto xf = fp8_edge_rows(m, k, rng);
    const size_t xb = std::string(xt) == "fp32" ? 4 : 2;
    std::vector<unsigned char> xbytes(xf.size() * xb);
    for (size_t i = 0; i < xf.size(); ++i) {
      if (xb == 4) {
        std::memcpy(&xbytes[4 * i], &xf[i], 4);
      } else {
        const uint16_t h = std::string(xt) == "bf16" ? float_to_bf16(xf[i]) : float_to_half(xf[i]);
        std::memcpy(&xbytes[2 * i], &h, 2);
      }
    }
    const auto want = tuner::quantize_fp8_rows(tuner::widen_to_float(xt, xbytes.data(), xf.size()), m, k, block);
    const auto ws = codegen::w8a8_workspace(32, k, block);
    const auto all = quantize_on_gpu(spec, xbytes.data(), xbytes.size(), m);
    for (int row = 0; row < m; ++row) {
      INFO("row " << row);
      const auto* got = all.data() + ws.codes + row * k;
      CHECK(std::vector<uint8_t>(got, got + k) == std::vector<uint8_t>(want.q.begin() + row * k, want.q.begin() + (row + 1) * k));
    }
    const int64_t padded = (ws.offset - ws.scale) / 4 / blocks;
    for (int row = 0; row < m; ++row)
      for (int b = 0; b < blocks; ++b) {
        INFO("row " << row << " block " << b);
        const float sc = param_at<float>(all, ws.scale, padded, b, row);
        CHECK(std::memcmp(&sc, &want.scale[row * blocks + b], 4) == 0);
      }
  }
}

TEST_CASE("w8a8_gemm format=e4m3: every candidate verifies (tuner)", "[gpu]") {
  if (!fp8_device(runtime::current_device())) return;  // (refusal: the quantization test above)
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (const char* s : {"k=512,n=256,m=1,format=e4m3", "k=1024,n=384,m=16,format=e4m3,x=bf16,bias=yes,act=relu",
                        "k=2048,n=512,m=256,format=e4m3,x=fp32,bias=yes,act=relu6",
                        // (on compute capability 9.0 the cublaslt family with fp16 and fp32 y and a bias)
                        "k=1024,n=256,m=128,format=e4m3,bias=yes", "k=512,n=384,m=4,format=e4m3,x=fp32,bias=yes"}) {
    INFO(s);
    test::expect_every_candidate_verifies(store, codegen::parse_spec("w8a8_gemm", s), /*allow_pruned=*/true);
  }
}

TEST_CASE("w8a8_gemm format=e4m3: typed API and C API", "[gpu]") {
  if (!fp8_device(runtime::current_device())) return;
  test::TempDir dir;
  set_cache_path(dir.file("api.db"));
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int m = 300, k = 512, n = 256, block = 128, blocks = k / block, tiles = n / 128;
  std::vector<float> x(static_cast<size_t>(m) * k), wf(n * k), bias(n);
  for (auto& v : x) v = 3.0f * u(rng);
  for (auto& v : wf) v = 0.1f * u(rng);
  for (auto& v : bias) v = u(rng);
  const auto a = tuner::quantize_fp8_rows(x, m, k, block);
  const auto w = tuner::quantize_fp8_tiles(wf, n, k, 128, block);
  const std::vector<int64_t> rows = {0, 1, 255, 256, m - 1};
  const auto ref = tuner::fp8_gemm_check_reference(a, w, bias, "relu", rows);
  std::vector<float> scale(blocks * tiles);  // [k/128][n/128]
  for (int t = 0; t < tiles; ++t)
    for (int b = 0; b < blocks; ++b) scale[b * tiles + t] = w.scale[t * blocks + b];
  tuner::DeviceBuffer dx(x.size() * 4), dq(w.q.size()), ds(scale.size() * 4), db(bias.size() * 4),
      dy(static_cast<size_t>(m) * n * 4);
  dx.upload(x.data(), x.size() * 4), dq.upload(w.q.data(), w.q.size()), ds.upload(scale.data(), scale.size() * 4);
  db.upload(bias.data(), bias.size() * 4);
  auto p = [](const tuner::DeviceBuffer& b) { return reinterpret_cast<void*>(b.ptr()); };
  auto check_y = [&] {
    std::vector<float> y(static_cast<size_t>(m) * n);
    dy.download(y.data(), y.size() * 4);
    for (size_t i = 0; i < ref.y.size(); ++i) {
      const int64_t r = rows[i / n], c = static_cast<int64_t>(i % n);
      INFO("y[" << r << "][" << c << "]");
      CHECK(std::fabs(y[r * n + c] - ref.y[i]) <=
            tuner::w8a8_fp8_tolerance(ref.magnitude[i], ref.tc_magnitude[i], ref.y[i], blocks, "fp32"));
    }
  };
  W8a8GemmShape shape;
  shape.k = k, shape.n = n, shape.block = block, shape.x = DType::fp32, shape.format = "e4m3", shape.bias = true;
  shape.act = "relu";
  QJIT_CU(cuMemsetD8(dy.ptr(), 0xff, dy.bytes()));
  w8a8_gemm(shape, {p(dx), p(dq), p(ds), nullptr, nullptr, p(db), p(dy), m});
  QJIT_CU(cuCtxSynchronize());
  check_y();
  shape.block = 64;
  CHECK_THROWS_WITH(w8a8_gemm(shape, {p(dx), p(dq), p(ds), nullptr, nullptr, p(db), p(dy), m}),
                    Catch::Contains("not block=64"));

  REQUIRE(qjit_set_cache_path(dir.file("c.db").c_str()) == QJIT_OK);
  qjit_w8a8_gemm_args c{};
  c.k = k, c.n = n, c.block = block, c.x_dtype = "fp32", c.bias = 1, c.act = "relu";
  c.x = p(dx), c.wq = p(dq), c.w_scale = p(ds), c.bias_ptr = p(db), c.y = p(dy), c.m = m;
  c.quant_a = "offset", c.quant_w = "e4m3";
  c_api_refused_then_run(c, "e4m3 quantizes x and W alike", dy, check_y);
}
