// awq_dequant on the CPU: packers against hand-computed words, round trips,
// the reference against hand-computed values, specs, generated source, NVRTC.
#include <catch2/catch.hpp>
#include <random>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/numeric.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "tests/helpers.h"
#include "tuner/reference/awq_dequant.h"

using namespace qjit;
using namespace qjit::tuner;

TEST_CASE("awq and gptq packing: hand-computed words", "[awq]") {
  PlainQuant p;
  p.k = 8, p.n = 8, p.g = 8;
  p.q.assign(64, 0);
  for (int j = 0; j < 8; ++j) p.q[j] = static_cast<uint8_t>(j + 1);        // row 0: 1..8
  for (int i = 0; i < 8; ++i) p.q[i * 8 + 0] = static_cast<uint8_t>(i + 1);  // column 0: 1..8
  // AWQ: nibble i holds column {0,2,4,6,1,3,5,7}[i]: values 1,3,5,7,2,4,6,8 from the low nibble up.
  CHECK(pack_awq_qweight(p)[0] == 0x86427531u);
  // GPTQ: word (0, 0) holds rows 0..7 of column 0 in order.
  CHECK(pack_gptq_qweight(p)[0] == 0x87654321u);
  // Zeros along n: interleaved (AWQ) vs plain (GPTQ).
  std::vector<uint8_t> z = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(pack_along_n(z, 1, 8, true)[0] == 0x86427531u);
  CHECK(pack_along_n(z, 1, 8, false)[0] == 0x87654321u);
}

TEST_CASE("packers round-trip on random data", "[awq]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (auto [k, n] : {std::pair<int64_t, int64_t>{8, 8}, {40, 24}, {256, 264}}) {
    PlainQuant p;
    p.k = k, p.n = n, p.g = 8;
    p.q.resize(k * n);
    for (auto& v : p.q) v = rng() & 0xf;
    CHECK(unpack_awq_qweight(pack_awq_qweight(p), k, n) == p.q);
    CHECK(unpack_gptq_qweight(pack_gptq_qweight(p), k, n) == p.q);
    CHECK(unpack_along_n(pack_along_n(p.q, k, n, true), k, n, true) == p.q);
    CHECK(unpack_along_n(pack_along_n(p.q, k, n, false), k, n, false) == p.q);
  }
}

TEST_CASE("dequant reference: hand-computed values, one rounding", "[awq]") {
  PlainQuant p;
  p.k = 8, p.n = 8, p.g = 8;
  p.q.assign(64, 12);
  p.z.assign(8, 3);
  p.s.assign(8, float_to_half(0.5f));
  auto out = dequant_reference(p, false, "fp16");
  CHECK(out[0] == float_to_half(4.5f));  // (12 - 3) * 0.5
  CHECK(half_to_float(out[63]) == 4.5f);
  out = dequant_reference(p, true, "fp16");  // symmetric: zero 8
  CHECK(half_to_float(out[5]) == 2.0f);
  p.s.assign(8, float_to_bf16(-0.75f));
  out = dequant_reference(p, false, "bf16");
  CHECK(bf16_to_float(out[0]) == -6.75f);
  // The result in the other type: one rounding of the exact product, where
  // rounding to the scales' type first would give another value.
  p.s.assign(8, float_to_bf16(1.0f + 1.0f / 128));
  out = dequant_reference(p, false, "bf16", "fp16");
  CHECK(half_to_float(out[0]) == 9.0703125f);  // 9·s, exact in fp16 (bf16 first: 9.0625)
  p.s.assign(8, float_to_half(1.0f + 4.0f / 1024));
  out = dequant_reference(p, false, "fp16", "bf16");
  CHECK(bf16_to_float(out[0]) == 9.0625f);  // 9·s = 9.03515625 (fp16 first: the tie 9.03125, then 9.0)
  // Extremes: q = 0, z = 15 and q = 15, z = 0 with the largest fp16 scale overflow to ±inf in fp16.
  p.q.assign(64, 0);
  p.z.assign(8, 15);
  p.s.assign(8, float_to_half(65504.0f));
  out = dequant_reference(p, false, "fp16");
  CHECK(out[0] == 0xfc00);  // -15 * 65504 rounds to -inf
}

TEST_CASE("awq_dequant specs and configs: errors name the value", "[awq][spec]") {
  CHECK_THROWS_WITH(codegen::parse_spec("awq_dequant", "k=100,n=64"), Catch::Contains("k=100"));
  CHECK_THROWS_WITH(codegen::parse_spec("awq_dequant", "k=256,n=60"), Catch::Contains("n=60"));
  CHECK_THROWS_WITH(codegen::parse_spec("awq_dequant", "k=256,n=64,g=48"), Catch::Contains("g=48"));
  CHECK_THROWS_WITH(codegen::parse_spec("awq_dequant", "k=256,n=64,zero=sym"), Catch::Contains("gptq"));
  CHECK_THROWS_WITH(codegen::parse_spec("awq_dequant", "k=256,n=64,scales=fp32"), Catch::Contains("fp32"));
  CHECK_NOTHROW(codegen::parse_spec("awq_dequant", "k=200,n=64,g=200,layout=gptq"));  // g = k
  const auto spec = codegen::parse_spec("awq_dequant", "k=256,n=64");
  CHECK_THROWS_WITH(codegen::find_op("awq_dequant").validate_config(spec, {{"threads", 100}, {"items", 1}, {"stream_stores", true}}),
                    Catch::Contains("threads"));
}

TEST_CASE("awq_dequant: constants in the source; the candidates compile for sm_80 and sm_90", "[awq][nvrtc]") {
  const auto& op = codegen::find_op("awq_dequant");
  // Of the 72 candidates, a fresh quarter per run, on two threads (all with QJIT_TEST_EXHAUSTIVE=1).
  const auto sample = test::compile_sample(1, "awq_dequant");
  std::vector<test::CompileJob> jobs_80, jobs_90;
  size_t taken = 0;
  for (const char* shape : {"k=4096,n=11008,g=128", "k=4096,n=11008,g=64,layout=gptq,zero=sym,scales=bf16,out=fp16",
                            "k=264,n=24,g=264,layout=gptq,out=bf16"}) {
    const auto spec = codegen::parse_spec("awq_dequant", shape);
    const auto src = codegen::generate_source(spec, op.default_config(spec));
    CHECK_THAT(src.text, Catch::Contains("constexpr int kK = " + std::to_string(spec.get_int("k")) + ";"));
    CHECK_THAT(src.text, Catch::Contains("constexpr int kGroup = " + std::to_string(spec.get_int("g")) + ";"));
    const std::string out = spec.get_str("out") == "scales" ? spec.get_str("scales") : spec.get_str("out");
    CHECK_THAT(src.text, Catch::Contains(out == "bf16" ? "using TO = qjit::bf16_t;" : "using TO = qjit::half_t;"));
    const auto space = op.tunable_space(spec);
    REQUIRE(space.size() == 24);
    for (size_t i = 0; i < space.size(); ++i)
      if (sample.takes(taken++)) (i % 2 ? jobs_80 : jobs_90).push_back({spec, space[i]});
  }
  test::compile_jobs(jobs_80, "sm_80", "awq_dequant sm_80");
  test::compile_jobs(jobs_90, "sm_90", "awq_dequant sm_90");
  for (const auto* jobs : {&jobs_80, &jobs_90})
    for (const auto& j : *jobs) {
      INFO(j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
      REQUIRE(j.error.empty());
      CHECK(j.result.ok);
      CHECK(j.result.spill_bytes == 0);
    }
  // bytes: packed weights + zeros + scales + fp16 output
  const auto s = codegen::parse_spec("awq_dequant", "k=4096,n=11008,g=128");
  CHECK(op.traffic(s).bytes == 4096.0 * 11008 / 2 + 32.0 * 11008 / 2 + 32.0 * 11008 * 2 + 4096.0 * 11008 * 2);
}
