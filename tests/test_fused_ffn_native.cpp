// fused_ffn on quantized weights (weights=native) on the CPU: spec errors, the
// cache key of dense specs left as it was, the reference on a hand-computed
// case, and NVRTC compiles of the candidates.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/numeric.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "tests/helpers.h"
#include "tuner/reference/fused_ffn.h"

using namespace qjit;
using qjit::codegen::parse_spec;

TEST_CASE("fused_ffn weights=native: specs, keys and errors", "[fused_ffn]") {
  // Dense specs keep the canonical JSON (and cache key) they had before the quantized keys existed.
  CHECK(parse_spec("fused_ffn", "d=4096,h=11008").canonical_json() ==
        R"({"act":"silu","d":4096,"dtype":"fp16","h":11008,"m":1,"op":"fused_ffn"})");
  const auto q = parse_spec("fused_ffn", "d=4096,h=11008,weights=native,bits=8");
  CHECK(q.canonical_json() == R"({"act":"silu","bits":8,"d":4096,"dtype":"fp16","h":11008,"m":1,"op":"fused_ffn",)"
                              R"("weights":"native"})");
  CHECK(q.get_int("g") == 128);  // defaults are still there to read
  CHECK(parse_spec("fused_ffn", q.shape_string()).canonical_json() == q.canonical_json());
  CHECK(codegen::find_op("fused_ffn").default_config(q).value("family", "") == "wq");

  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=4096,h=64,bits=8"), Catch::Contains("bits=8 applies to weights=native"));
  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=4096,h=64,scales=bf16"), Catch::Contains("scales=bf16"));
  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=4000,h=64,weights=native"), Catch::Contains("d=4000 is not a multiple of 64"));
  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=4096,h=72,weights=native"), Catch::Contains("h=72 is not a multiple of 16"));
  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=4096,h=64,weights=native,g=96"), Catch::Contains("g=96"));
  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=192,h=64,weights=native,g=128"), Catch::Contains("d=192 is not divisible by g=128"));
  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=4096,h=64,weights=native,bits=5"), Catch::Contains("bits=5"));
  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=4096,h=64,weights=native,dtype=mixed"), Catch::Contains("dtype=mixed"));
  // A dense family's config is refused for a quantized spec, and the other way round.
  const auto& op = codegen::find_op("fused_ffn");
  CHECK_THROWS_WITH(op.validate_config(q, {{"family", "mma"}, {"warps", 4}, {"split_d", 1}, {"unroll", 1}, {"tiles", 1}}),
                    Catch::Contains("family"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("fused_ffn", "d=4096,h=64"), op.default_config(q)),
                    Catch::Contains("wq"));
  // Odd tile counts cannot pair W1 with W3.
  auto odd = op.default_config(q);
  odd["tiles"] = 1;
  CHECK_THROWS_WITH(op.validate_config(q, odd), Catch::Contains("multiple of the 2 matrices"));
}

TEST_CASE("fused_ffn_native_reference: hand-computed case", "[fused_ffn]") {
  // d = 64, h = 16, g = 64, x = 1: gate = Σ_k (q1 - z)·s, up = Σ_k (q3 - z)·s.
  const auto spec = parse_spec("fused_ffn", "d=64,h=16,g=64,weights=native,zero=int");
  std::vector<uint8_t> x(2 * 64);
  for (int i = 0; i < 64; ++i) {
    const uint16_t one = float_to_half(1.0f);
    std::memcpy(&x[2 * i], &one, 2);
  }
  auto matrix = [](uint8_t q) {
    tuner::PlainQuant p;
    p.k = 64, p.n = 16, p.g = 64, p.bits = 4;
    p.q.assign(64 * 16, q);
    p.z.assign(16, 8);
    p.s.assign(16, float_to_half(0.03125f));
    p.o.assign(16, 0);
    return p;
  };
  // gate = (10 - 8)·2^-5·64 = 4, up = (5 - 8)·2^-5·64 = -6: y = SiLU(4)·(-6).
  const auto y = tuner::fused_ffn_native_reference(spec, x.data(), matrix(10), matrix(5));
  REQUIRE(y.size() == 16);
  const double expect = 4.0 / (1.0 + std::exp(-4.0)) * -6.0;
  for (double v : y) CHECK(v == Approx(expect).epsilon(1e-15));
}

TEST_CASE("fused_ffn weights=native: candidates compile for sm_90", "[fused_ffn][nvrtc]") {
  const auto& op = codegen::find_op("fused_ffn");
  // The main shape's whole space at M = 1 (in CI a quarter, a different one
  // each run), then every bit width, zero mode, type and activation through
  // each spec's default and a spread of its space.
  std::vector<test::CompileJob> jobs;
  const auto main = parse_spec("fused_ffn", "d=4096,h=11008,weights=native");
  const auto space_main = op.tunable_space(main);
  const auto sample = test::compile_sample(1, "fused_ffn native d=4096,h=11008");
  for (size_t i = 0; i < space_main.size(); ++i)
    if (sample.takes(i)) jobs.push_back({main, space_main[i]});
  for (const char* s : {"d=64,h=16,m=3,bits=2,zero=sym,g=32,weights=native",
                        "d=192,h=48,m=8,bits=3,zero=float,scales=bf16,dtype=fp32,g=64,weights=native",
                        "d=256,h=32,m=5,bits=8,dtype=bf16,act=silu_lut,g=256,weights=native",
                        // fp32 x at an M that is no power of two: x's row blocks in the ring
                        "d=256,h=32,m=3,bits=2,dtype=fp32,g=256,weights=native"}) {
    const auto spec = parse_spec("fused_ffn", s);
    const auto space = op.tunable_space(spec);
    REQUIRE(!space.empty());
    jobs.push_back({spec, op.default_config(spec)});
    for (size_t i = 0; i < space.size(); i += 4) jobs.push_back({spec, space[i]});
  }
  test::compile_jobs(jobs, "sm_90", "fused_ffn native");
  size_t spilling = 0;
  for (const auto& j : jobs) {
    INFO(j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
    REQUIRE(j.error.empty());
    CHECK(j.result.ok);
    CHECK(j.result.ptx.find(".entry qjit_fused_ffn") != std::string::npos);
    // As wq_gemm: the default (run untuned on a miss) never spills; few others do.
    if (j.config == op.default_config(j.spec)) CHECK(j.result.spill_bytes == 0);
    spilling += j.result.spill_bytes > 0;
  }
  CHECK(spilling * 10 <= jobs.size());
}
