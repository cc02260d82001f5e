// qconv2d's op on the CPU: spec errors naming the bad value, the tuning space
// and its pruning, the weight packer's round trip, the tolerance bound, the
// direct kernel's formula against the reference (a CPU transcription of it
// within the bound), and NVRTC compiles of the candidates (every family) for
// sm_80 and sm_90.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <random>
#include <set>

#include "codegen/error.h"
#include "codegen/numeric.h"
#include "codegen/ops/qconv2d.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "tests/helpers.h"
#include "tuner/reference/qconv2d.h"

using namespace qjit;
using namespace qjit::tuner;

namespace {

const char* kMain = "n=1,ci=64,h=56,w=56,co=64,pad_h=1,pad_w=1,layout=nhwc";

}  // namespace

TEST_CASE("qconv2d specs: bad values are named", "[qconv2d]") {
  using codegen::parse_spec;
  const std::string base = "n=1,ci=64,h=8,w=8,co=32";
  CHECK_NOTHROW(parse_spec("qconv2d", base));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",block=48"), Catch::Contains("block=48 does not divide ci=64"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", "ci=63,h=8,w=8,co=32,block=63"),
                    Catch::Contains("even ci") && Catch::Contains("ci=63"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", "ci=66,h=8,w=8,co=32,block=33,bits=4"), Catch::Contains("block=33"));
  CHECK_NOTHROW(parse_spec("qconv2d", "ci=63,h=8,w=8,co=32,block=21,bits=8"));  // int8: any block dividing ci
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",pad_h=-1"), Catch::Contains("pad_h=-1"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",stride_w=0"), Catch::Contains("stride_w=0"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",dil_h=0"), Catch::Contains("dil_h=0"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",dil_h=4"),
                    Catch::Contains("output is empty along h") && Catch::Contains("dilated kernel 9"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",bits=5"), Catch::Contains("bits=5"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",bits=2"), Catch::Contains("bits=2"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",x=bf16"), Catch::Contains("x=bf16"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",layout=chwn"), Catch::Contains("layout=chwn"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", base + ",act=gelu"), Catch::Contains("act=gelu"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", "ci=64,h=8,w=8"), Catch::Contains("needs 'co'"));
  CHECK_THROWS_WITH(parse_spec("qconv2d", "n=65536,ci=64,h=256,w=256,co=64,kh=1,kw=1,block=64"),
                    Catch::Contains("x has") && Catch::Contains("2^31"));
  // The output size rule is the reference's.
  CHECK(codegen::conv_out_size(56, 3, 2, 1, 1, "h") == 28);
  CHECK(codegen::conv_out_size(7, 3, 1, 0, 2, "w") == 3);
}

TEST_CASE("qconv2d space: families, pruning, legality of every candidate", "[qconv2d]") {
  const auto& op = codegen::find_op("qconv2d");
  const auto spec = codegen::parse_spec("qconv2d", kMain);
  const auto space = op.tunable_space(spec);
  std::set<std::string> families;
  for (const auto& c : space) {
    INFO(c.dump());
    families.insert(c.at("family").get<std::string>());
    CHECK_NOTHROW(op.validate_config(spec, c));
    CHECK(op.template_path(c).find("templates/qconv2d/") == 0);
  }
  CHECK(families == std::set<std::string>{"direct", "implicit_gemm", "igemm_ring"});
  CHECK(space.size() >= 10);
  CHECK(space.size() <= 120);  // (each unsplit ring config twice: its weights dequantised per block or per call)
  INFO(space.size() << " candidates");
  CHECK(op.default_config(spec).at("family") == "implicit_gemm");
  // ci without 32 has no igemm_ring; nchw fp16 x has it (through a transpose step).
  for (const char* s : {"ci=48,h=8,w=8,co=32,block=16,layout=nhwc", "ci=48,h=8,w=8,co=32,block=16"})
    for (const auto& c : op.tunable_space(codegen::parse_spec("qconv2d", s))) CHECK(c.at("family") != "igemm_ring");
  {
    bool ring_nchw = false;
    for (const auto& c : op.tunable_space(codegen::parse_spec("qconv2d", "ci=64,h=8,w=8,co=32")))
      ring_nchw |= c.at("family") == "igemm_ring";
    CHECK(ring_nchw);
  }
  // fp32 x and ci without 16 leave only the direct kernel.
  for (const char* s : {"ci=64,h=8,w=8,co=32,x=fp32", "ci=6,h=8,w=8,co=32,block=6"}) {
    const auto sp = codegen::parse_spec("qconv2d", s);
    for (const auto& c : op.tunable_space(sp)) CHECK(c.at("family") == "direct");
    CHECK(op.default_config(sp).at("family") == "direct");
  }
  // Illegal configs are named.
  const nlohmann::json bad_bk = {{"family", "implicit_gemm"}, {"bm", 64}, {"bn", 64}, {"bk", 64},
                                 {"warps_m", 2}, {"warps_n", 2}};
  CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("qconv2d", "ci=32,h=8,w=8,co=32"), bad_bk),
                    Catch::Contains("bk=64 does not divide ci=32"));
  CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("qconv2d", "ci=32,h=8,w=8,co=32,x=fp32"), bad_bk),
                    Catch::Contains("x=fp32"));
  CHECK_THROWS_WITH(op.validate_config(spec, {{"family", "winograd"}}), Catch::Contains("unknown family 'winograd'"));
  CHECK_THROWS_WITH(op.validate_config(spec, {{"family", "direct"}, {"threads", 96}}), Catch::Contains("threads"));
  // Geometry: the GEMM grid covers M = n·oh·ow and co.
  const auto k = op.plan(spec, bad_bk).main_kernel();
  CHECK(k.geometry.grid[0] == (56 * 56 + 63) / 64);
  CHECK(k.geometry.grid[1] == 1);
  CHECK(k.geometry.dynamic_smem == 2 * (64 + 64) * (64 + 8) * 2);
  // igemm_ring: illegal configs named; the split grid and its workspace.
  nlohmann::json ring = {{"family", "igemm_ring"}, {"bm", 64}, {"bn", 64}, {"bk", 64}, {"warps_m", 2},
                         {"warps_n", 2},           {"stages", 3}, {"split", 1}};
  CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("qconv2d", "ci=32,h=8,w=8,co=32,layout=nhwc"), ring),
                    Catch::Contains("bk=64 does not divide ci=32"));
  {
    // nchw: x transposed to nhwc at the workspace's start by a first step, which the ring reads; the
    // ring's counters and pieces after it.
    const auto nchw = codegen::parse_spec("qconv2d", "n=2,ci=64,h=9,w=10,co=32,pad_h=1,pad_w=1");
    auto split2 = ring;
    split2["split"] = 2;
    const auto p = op.plan(nchw, split2);
    REQUIRE(p.kernels.size() == 2);
    REQUIRE(p.steps.size() == 2);
    CHECK(p.kernels[0].symbol == "qjit_qconv2d_to_nhwc");
    CHECK(p.kernels[0].geometry.grid[0] == 3);  // 90 points in tiles of 32
    CHECK(p.kernels[0].geometry.grid[1] == 2);  // 64 channels
    CHECK(p.kernels[0].geometry.grid[2] == 2);  // images
    const size_t xt = (2 * 90 * 64 * 2 + 255) / 256 * 256;
    CHECK((p.kernels[0].params[0].arg == "x" && p.kernels[0].params[1].offset == 0));
    const auto& r = p.kernels[1];
    CHECK(r.symbol == "qjit_qconv2d_igemm_ring");
    CHECK((r.params[0].kind == codegen::KernelParam::Kind::workspace && r.params[0].offset == 0));
    CHECK(r.params.back().offset == xt);
    CHECK(p.workspace_fixed == xt + 256);  // one counter per tile, rounded
    CHECK(r.geometry.workspace_per_block == 64 * 64 * 4);
    CHECK(op.plan(nchw, ring).workspace_fixed == xt);
    // predeq: a second step dequantises the weights to fp16 after the transposed x; the ring reads them in
    // place of qweight, and its own workspace follows them.
    auto pre = split2;
    pre["predeq"] = 1;
    const auto pp = op.plan(nchw, pre);
    REQUIRE(pp.kernels.size() == 3);
    REQUIRE(pp.steps.size() == 3);
    CHECK(pp.kernels[1].symbol == "qjit_qconv2d_dequant_w");
    const size_t wh = (32 * 9 * 64 * 2 + 255) / 256 * 256;
    CHECK(pp.kernels[1].geometry.grid[0] == (32 * 9 * 64 / 8 + 255) / 256);
    CHECK((pp.kernels[1].params[0].arg == "qweight" && pp.kernels[1].params[3].offset == xt));
    const auto& pr = pp.kernels[2];
    CHECK((pr.params[1].kind == codegen::KernelParam::Kind::workspace && pr.params[1].offset == xt));
    CHECK(pr.params.back().offset == xt + wh);
    CHECK(pp.workspace_fixed == xt + wh + 256);
    CHECK(pr.geometry.dynamic_smem == 3 * (64 * 64 * 2 + 64 * 64 * 2));  // both tiles in fp16, no dequant buffers
    // The key is left out at 0 (configs made before it keep their form); both kinds are in the space.
    int with = 0, without = 0;
    for (const auto& c : op.tunable_space(nchw))
      if (c.at("family") == "igemm_ring") (c.contains("predeq") ? with : without) += 1;
    CHECK((with > 0 && without > with));
    pre["predeq"] = 2;
    CHECK_THROWS_WITH(op.validate_config(nchw, pre), Catch::Contains("predeq must be 0 or 1"));
    const auto src = codegen::generate_source(nchw, ring);
    const auto built = codegen::compile(src, "sm_90");
    INFO(built.log);
    REQUIRE(built.ok);
    CHECK(built.ptx.find(".entry qjit_qconv2d_to_nhwc") != std::string::npos);
    CHECK(built.spill_bytes == 0);
  }
  const auto small = codegen::parse_spec("qconv2d", "n=1,ci=512,h=14,w=14,co=512,pad_h=1,pad_w=1,layout=nhwc");
  ring["split"] = 5;  // K = 256 is 4 chunks of 64
  CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("qconv2d", "ci=256,h=7,w=7,co=128,kh=1,kw=1,layout=nhwc"), ring),
                    Catch::Contains("split=5 exceeds the 4 chunks"));
  ring["split"] = 65;
  CHECK_THROWS_WITH(op.validate_config(small, ring), Catch::Contains("split must be 1 to 64"));
  ring["split"] = 8;
  CHECK_NOTHROW(op.validate_config(small, ring));
  const auto rp = op.plan(small, ring);
  const auto& rk = rp.main_kernel();
  CHECK(rk.geometry.grid[0] == 4);  // 196 output points
  CHECK(rk.geometry.grid[1] == 8);
  CHECK(rk.geometry.grid[2] == 8);
  CHECK(rk.geometry.dynamic_smem == 3 * (64 * 64 * 2 + 64 * 32) + 2 * 64 * 64 * 2);
  CHECK(rk.geometry.workspace_per_block == 64 * 64 * 4);
  CHECK(rp.workspace_fixed == 256);
  CHECK(rk.params.back().kind == codegen::KernelParam::Kind::workspace);
  // Few output tiles: the space offers split-K for them.
  bool split = false;
  for (const auto& c : op.tunable_space(small)) split |= c.at("family") == "igemm_ring" && c.at("split") > 1;
  CHECK(split);
  {
    // The wgmma ring (sm_90a): a warpgroup per 64 rows by every column, bk 64, splits that divide the chunks;
    // in the space on sm_90 only, its ring 1024 bytes later (the swizzle atoms' alignment).
    nlohmann::json wg = {{"family", "igemm_ring"}, {"bm", 128}, {"bn", 128}, {"bk", 64}, {"warps_m", 8},
                         {"warps_n", 1},           {"stages", 4}, {"split", 1}, {"wgmma", 1}};
    CHECK_NOTHROW(op.validate_config(small, wg));
    CHECK(op.needs_sm90a(wg));
    CHECK_FALSE(op.needs_sm90a(ring));
    const auto wk = op.plan(small, wg).main_kernel();
    CHECK(wk.geometry.block[0] == 256);
    CHECK(wk.geometry.dynamic_smem == 4 * (128 * 64 * 2 + 128 * 32) + 2 * 128 * 64 * 2 + 1024);
    auto bad = wg;
    bad["warps_m"] = 4;
    CHECK_THROWS_WITH(op.validate_config(small, bad), Catch::Contains("warps_m = bm / 16"));
    bad = wg, bad["bk"] = 32;
    CHECK_THROWS_WITH(op.validate_config(small, bad), Catch::Contains("bk=64"));
    bad = wg, bad["split"] = 5;  // 72 chunks
    CHECK_THROWS_WITH(op.validate_config(small, bad), Catch::Contains("split to divide the 72 chunks"));
    bad = wg, bad["wgmma"] = 2;
    CHECK_THROWS_WITH(op.validate_config(small, bad), Catch::Contains("wgmma must be 0 or 1"));
    // inflight: a chunk's wgmma across the next barrier, three dequantised B tiles, 4+ stages, wgmma only
    auto inflight = wg;
    inflight["inflight"] = 1;
    CHECK_NOTHROW(op.validate_config(small, inflight));
    CHECK(op.plan(small, inflight).main_kernel().geometry.dynamic_smem ==
          4 * (128 * 64 * 2 + 128 * 32) + 3 * 128 * 64 * 2 + 1024);
    bad = inflight, bad["stages"] = 3;
    CHECK_THROWS_WITH(op.validate_config(small, bad), Catch::Contains("inflight needs wgmma and 4 or more stages"));
    bad = ring, bad["inflight"] = 1, bad["stages"] = 4;
    CHECK_THROWS_WITH(op.validate_config(small, bad), Catch::Contains("inflight needs wgmma"));
    CHECK(codegen::generate_source(small, inflight).text.find("constexpr bool kInflight = true;") != std::string::npos);
    CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("qconv2d", "ci=96,h=8,w=8,co=64,layout=nhwc"), wg),
                      Catch::Contains("bk=64 does not divide ci=96"));
    codegen::DeviceLimits a100;
    a100.arch = "sm_80", a100.compute_capability = 80, a100.sm_count = 108, a100.smem_per_sm = 164 * 1024;
    int on_90 = 0, on_80 = 0, split_90 = 0;
    int inflight_90 = 0;
    for (const auto& c : op.candidates(small, codegen::DeviceLimits{}))
      if (c.value("wgmma", 0) == 1) on_90 += 1, split_90 += c.at("split") > 1, inflight_90 += c.value("inflight", 0);
    CHECK(inflight_90 > 0);
    for (const auto& c : op.candidates(small, a100)) on_80 += c.value("wgmma", 0) == 1;
    CHECK(on_90 >= 8);
    CHECK(split_90 > 0);  // 4 × 8 tiles of 128 × 128 for 132 SMs
    CHECK(on_80 == 0);
  }
  const auto t = op.traffic(spec);
  CHECK(t.flops == 2.0 * 56 * 56 * 64 * 9 * 64);
  CHECK(t.bytes == 56 * 56 * 64 * 2 * 2 + 64 * 9 * 64 / 2 + 64 * 2 * 8);
}

TEST_CASE("qconv2d weight packer: bit-exact round trips, int4 and int8", "[qconv2d]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int bits : {4, 8})
    for (auto [co, ci, kh, kw] : {std::array<int64_t, 4>{1, 2, 1, 1}, {3, 6, 3, 3}, {5, 16, 1, 3}, {8, 64, 3, 3}}) {
      const int lo = bits == 4 ? -8 : -128, span = bits == 4 ? 16 : 256;
      std::vector<int8_t> q(co * ci * kh * kw);
      for (auto& v : q) v = static_cast<int8_t>(lo + static_cast<int>(rng() % span));
      const auto packed = pack_qconv2d_weights(q, bits, co, ci, kh, kw);
      CHECK(packed.size() == q.size() * bits / 8);
      CHECK(unpack_qconv2d_weights(packed, bits, co, ci, kh, kw) == q);
      // Where the kernels read code (co, fy, fx, c): byte (co·kh·kw + fy·kw + fx)·ci·bits/8 + c·bits/8.
      for (int probe = 0; probe < 20; ++probe) {
        const int64_t o = rng() % co, c = rng() % ci, fy = rng() % kh, fx = rng() % kw;
        const int8_t want = q[((o * ci + c) * kh + fy) * kw + fx];
        const int64_t row = ((o * kh + fy) * kw + fx) * ci;
        if (bits == 8) {
          CHECK(static_cast<int8_t>(packed[row + c]) == want);
        } else {
          const uint8_t byte = packed[(row + c) / 2];
          CHECK((c % 2 ? (byte & 15) : (byte >> 4)) - 8 == want);
        }
      }
    }
  CHECK_THROWS_WITH(pack_qconv2d_weights(std::vector<int8_t>(4, 9), 4, 1, 2, 1, 2), Catch::Contains("outside"));
  CHECK_THROWS_WITH(pack_qconv2d_weights(std::vector<int8_t>(4, 0), 3, 1, 2, 1, 2), Catch::Contains("bits=3"));
}

// The same bytes are asserted for Python's packer (python/tests/test_nn_modules.py,
// qjit.conv.pack_codes): both sides agree with each other, not only with themselves.
TEST_CASE("qconv2d weight packer: the fixed example Python's packer is checked against", "[qconv2d]") {
  std::vector<int8_t> q4(16), q8(16);  // codes [Co=2][Ci=4][Kh=1][Kw=2]
  for (int i = 0; i < 16; ++i) {
    q4[i] = static_cast<int8_t>(i * 5 % 16 - 8);
    q8[i] = static_cast<int8_t>(i * 37 % 256 - 128);
  }
  CHECK(pack_qconv2d_weights(q4, 4, 2, 4, 1, 2) == std::vector<uint8_t>{10, 78, 95, 147, 130, 198, 215, 27});
  CHECK(pack_qconv2d_weights(q8, 8, 2, 4, 1, 2) ==
        std::vector<uint8_t>{128, 202, 20, 94, 165, 239, 57, 131, 168, 242, 60, 134, 205, 23, 97, 171});
}

TEST_CASE("qconv2d tolerance: the bound's terms, and the fp32 kernel's formula stays inside it", "[qconv2d]") {
  // Zero magnitude: only the output's floor (fp16's half subnormal step).
  CHECK(qconv2d_tolerance(0, 0, 576, "fp32") == 0);
  CHECK(qconv2d_tolerance(0, 0, 576, "fp16") == 0x1p-25);
  // fp16 x: dominated by rounding w to fp16 (2^-11) and y to fp16 (2^-11·|y|).
  const double t16 = qconv2d_tolerance(10.0, 1.0, 576, "fp16");
  CHECK(t16 > 10.0 * 0x1p-11 + 0x1p-11);
  CHECK(t16 < 10.0 * 0x1p-11 * 1.1 + 0x1p-11 * 1.01 + 10.0 * 600 * 0x1p-23 * 1.01);
  // fp32 x: the k + 4 accumulation roundings at 2^-23.
  const double t32 = qconv2d_tolerance(10.0, 1.0, 576, "fp32");
  CHECK(t32 == Approx(10.0 * 580 * 0x1p-23 + 0x1p-24).epsilon(1e-3));
  CHECK_THROWS_WITH(qconv2d_tolerance(1, 1, 9, "bf16"), Catch::Contains("bf16"));

  // A CPU transcription of the direct kernel in fp32 (fmaf for w and for the
  // sum, the kernel's order) stays within the bound of the float64 reference
  // on random data, and an error of 4× the bound on one output is caught.
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Conv2dShape s;
  s.batch = 2, s.ci = 32, s.h = 7, s.w = 6, s.co = 5, s.kh = 3, s.kw = 3, s.pad_h = 1, s.pad_w = 1, s.layout = "nhwc";
  QConvWeights w;
  w.bits = 4, w.block = 8;
  w.q.resize(s.co * s.ci * 9);
  for (auto& v : w.q) v = static_cast<int8_t>(static_cast<int>(rng() % 16) - 8);
  w.scale.resize(s.co * 4), w.offset.resize(s.co * 4);
  for (auto& v : w.scale) v = 0.02f * u(rng);
  for (auto& v : w.offset) v = 0.02f * u(rng);
  std::vector<float> x(s.batch * s.h * s.w * s.ci), bias(s.co);
  for (auto& v : x) v = u(rng);
  for (auto& v : bias) v = u(rng);
  std::vector<double> mag;
  const auto ref = qconv2d_reference(s, x, w, bias, "relu6", &mag);
  size_t i = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t oy = 0; oy < s.h; ++oy)
      for (int64_t ox = 0; ox < s.w; ++ox)
        for (int64_t co = 0; co < s.co; ++co, ++i) {
          float acc = 0.0f;
          for (int64_t fy = 0; fy < 3; ++fy)
            for (int64_t fx = 0; fx < 3; ++fx) {
              const int64_t iy = oy - 1 + fy, ix = ox - 1 + fx;
              if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
              for (int64_t c = 0; c < s.ci; ++c) {
                const float wv = std::fmaf(w.q[((co * s.ci + c) * 3 + fy) * 3 + fx], w.scale[co * 4 + c / 8],
                                           w.offset[co * 4 + c / 8]);
                acc = std::fmaf(x[((b * s.h + iy) * s.w + ix) * s.ci + c], wv, acc);
              }
            }
          const float y = std::min(std::max(acc + bias[co], 0.0f), 6.0f);
          const double tol = qconv2d_tolerance(mag[i], ref[i], s.kh * s.kw * s.ci, "fp32");
          INFO("y[" << i << "] = " << y << ", reference " << ref[i]);
          CHECK(std::fabs(y - ref[i]) <= tol);
          if (ref[i] > 0.5 && ref[i] < 5.5) CHECK(std::fabs(y + 4 * tol - ref[i]) > tol);
        }
  CHECK(i == ref.size());
}

TEST_CASE("qconv2d: candidates compile for sm_80 and sm_90 without spills", "[qconv2d][nvrtc]") {
  const auto& op = codegen::find_op("qconv2d");
  // The main nhwc int4 shape's whole space, an nchw int8 one (strided gather),
  // and the odd specs' defaults and direct kernels. (In CI a quarter of each
  // space, a different quarter each run: test::compile_sample.)
  std::vector<test::CompileJob> jobs;
  for (const char* s : {kMain, "n=8,ci=128,h=28,w=28,co=128,stride_h=2,stride_w=2,pad_h=1,pad_w=1,bits=8,block=128,"
                               "bias=yes,act=relu6"}) {
    const auto spec = codegen::parse_spec("qconv2d", s);
    const auto space = op.tunable_space(spec);
    const auto sample = test::compile_sample(1, std::string("qconv2d ") + s);
    for (size_t i = 0; i < space.size(); ++i)
      if (sample.takes(i)) jobs.push_back({spec, space[i]});
    jobs.push_back({spec, op.default_config(spec)});
  }
  // igemm_ring on the small-M shape (split-K) and an int8 one with
  // blocks of 4 channels (a (scale, offset) per pair of codes), a sixteenth of each.
  for (const char* s : {"n=1,ci=512,h=14,w=14,co=512,pad_h=1,pad_w=1,layout=nhwc",
                        "n=2,ci=96,h=7,w=9,co=37,kh=1,kw=1,block=4,bits=8,layout=nhwc,bias=yes,act=relu"}) {
    const auto spec = codegen::parse_spec("qconv2d", s);
    const auto space = op.tunable_space(spec);
    const auto sample = test::compile_sample(4, std::string("qconv2d ring ") + s);
    for (size_t i = 0; i < space.size(); ++i)
      if (space[i].at("family") == "igemm_ring" && sample.takes(i)) jobs.push_back({spec, space[i]});
  }
  for (const char* s : {"n=3,ci=48,h=9,w=11,co=40,kh=1,kw=1,block=16,layout=nhwc,bits=8",
                        "n=2,ci=16,h=13,w=7,co=24,kh=3,kw=5,dil_h=2,dil_w=2,pad_w=2,block=2,act=relu",
                        "n=1,ci=6,h=10,w=10,co=8,block=6,x=fp32,bias=yes,layout=nhwc",
                        "n=1,ci=3,h=10,w=10,co=8,block=3,bits=8,x=fp32,stride_h=3"}) {
    const auto spec = codegen::parse_spec("qconv2d", s);
    jobs.push_back({spec, op.default_config(spec)});
    jobs.push_back({spec, op.tunable_space(spec).front()});
  }
  size_t spilling = 0, compiled = 0;
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto run = jobs;
    // the wgmma ring (needs_sm90a: compiled for sm_90a) is offered on sm_90 only
    if (std::string(arch) == "sm_80")
      std::erase_if(run, [&](const test::CompileJob& j) { return op.needs_sm90a(j.config); });
    test::compile_jobs(run, arch, std::string("qconv2d ") + arch);
    compiled += run.size();
    for (const auto& j : run) {
      INFO(arch << " " << j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
      REQUIRE(j.error.empty());
      CHECK(j.result.ok);
      CHECK(j.result.ptx.find(".entry qjit_qconv2d_") != std::string::npos);
      const bool wgmma = j.config.value("wgmma", 0) == 1;
      CHECK(op.needs_sm90a(j.config) == wgmma);
      if (wgmma) {
        CHECK(j.result.ptx.find("wgmma.mma_async.sync.aligned.m64n") != std::string::npos);
        CHECK(j.result.log.find("C75") == std::string::npos);  // ptxas serialises wgmma on any C75xx advisory
        CHECK(j.result.ptx.find("mma.sync.aligned") == std::string::npos);
      } else if (j.config.at("family") != "direct") {
        CHECK(j.result.ptx.find("mma.sync.aligned.m16n8k16") != std::string::npos);
      }
      if (j.config.at("family") == "igemm_ring") {
        if (!wgmma) CHECK(j.result.ptx.find("ldmatrix.sync.aligned.m8n8.x4") != std::string::npos);
        CHECK(j.result.ptx.find("cp.async.cg.shared.global") != std::string::npos);
      }
      // The tuner prunes a spilling candidate before any GPU time, but the
      // default config runs untuned on a runtime miss: it must never spill.
      if (j.config == op.default_config(j.spec)) CHECK(j.result.spill_bytes <= 0);
      spilling += j.result.spill_bytes > 0;
    }
  }
  // Most of the space is spill-free; ptxas spills a few of the largest
  // tiles (up to 255 registers), which the tuner then prunes.
  INFO(spilling << " of " << compiled << " compiles spill");
  CHECK(spilling * 4 <= compiled);
}
