// wq_gemm on the CPU: the native layout against hand-computed words, round
// trips for every bit width, awq/gptq -> native repacking, the reference on
// hand-computed cases, spec errors, and NVRTC compiles of the candidates (the
// families' keys: test_wq_gemm_mma.cpp and test_wq_gemm_large.cpp).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <random>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/numeric.h"
#include "codegen/ops/wq_gemm.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "tests/helpers.h"
#include "tuner/reference/wq_gemm.h"

using namespace qjit;
using namespace qjit::tuner;

namespace {

PlainQuant random_quant(int64_t k, int64_t n, int64_t g, int bits, std::mt19937_64& rng) {
  PlainQuant p;
  p.k = k, p.n = n, p.g = g, p.bits = bits;
  p.q.resize(k * n);
  for (auto& v : p.q) v = static_cast<uint8_t>(rng() % (1u << bits));
  p.z.resize((k / g) * n);
  for (auto& v : p.z) v = static_cast<uint8_t>(rng() % (1u << bits));
  p.s.assign((k / g) * n, float_to_half(0.5f));
  p.o.assign((k / g) * n, float_to_half(0.0f));
  return p;
}

PlainQuant constant_quant(int64_t k, int64_t n, int bits, uint8_t q) {
  PlainQuant p;
  p.k = k, p.n = n, p.g = k, p.bits = bits;
  p.q.assign(k * n, q);
  return p;
}

}  // namespace

TEST_CASE("native layout: hand-computed words", "[wq_gemm]") {
  // Lane 0 (gq = 0, t = 0) register 0 holds row n = 0 (lo k = 0, hi k = 1);
  // register 1 row 8 (k = 0, 1); register 2 row 0 (k = 8, 9); register 3 row 8 (k = 8, 9);
  // register 4 (step 1) row 0 (k = 2, 3).
  PlainQuant p = constant_quant(64, 16, 4, 0);
  auto at = [&](int k, int n) -> uint8_t& { return p.q[k * 16 + n]; };
  at(0, 0) = 1, at(1, 0) = 2, at(8, 0) = 3, at(9, 0) = 4;
  at(0, 8) = 5, at(1, 8) = 6, at(8, 8) = 7, at(9, 8) = 8;
  at(2, 0) = 9, at(3, 0) = 10;
  // 4 bits: nibble i = lo of register i, nibble i + 4 = its hi:
  // word 0's nibbles 0..7 = 1, 5, 3, 7, 2, 6, 4, 8; word 1's nibbles 0 and 4 = 9, 10.
  CHECK(pack_native(p)[0] == 0x84627351u);
  CHECK(pack_native(p)[1] == 0x000a0009u);
  // 8 bits: word 0 holds registers 0, 1: byte i = lo of register i, byte i + 2 = hi.
  p.bits = 8;
  CHECK(pack_native(p)[0] == 0x06020501u);
  // Lane 1 (t = 1) starts at k = 16: its first word is the lane's first 16-byte vector slot.
  at(16, 0) = 11;
  CHECK(pack_native(p)[4] == 0x0000000bu);
  // Lane 9 (gq = 2, t = 1: rows 2 and 10 at k = 16 ..) sits at slot 9 ^ 1 = 8 (the XOR of
  // native_slot), and lane 8 (t = 0) at slot 9.
  at(16, 2) = 12, at(0, 2) = 13;
  CHECK(pack_native(p)[8 * 4] == 0x0000000cu);
  CHECK(pack_native(p)[9 * 4] == 0x0000000du);
  // 2 bits: all values 3 -> both words of the 2-bit layout all ones.
  CHECK(pack_native(constant_quant(64, 16, 2, 3))[0] == 0xffffffffu);
  // 3 bits = 2-bit plane (words 0, 1) + 1-bit plane (word 2), one word per lane per plane:
  // q = 4 sets only bit 2, q = 3 only bits 0..1.
  auto four = pack_native(constant_quant(64, 16, 3, 4)), three = pack_native(constant_quant(64, 16, 3, 3));
  REQUIRE(four.size() == 64 * 16 * 3 / 32);
  CHECK(four[0] == 0u);          // plane 0, lane 0
  CHECK(four[64] == 0xffffffffu);  // plane 2 (word 2 of the lane), lane 0: 2 * 32 words in
  CHECK(three[0] == 0xffffffffu);
  CHECK(three[64] == 0u);
}

TEST_CASE("native layout: round trips for every bit width", "[wq_gemm]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int bits : {2, 3, 4, 8})
    for (auto [k, n] : {std::pair<int64_t, int64_t>{64, 16}, {192, 48}, {128, 32}}) {
      const PlainQuant p = random_quant(k, n, 64, bits, rng);
      const auto w = pack_native(p);
      CHECK(static_cast<int64_t>(w.size()) == k * n * bits / 32);
      CHECK(unpack_native(w, k, n, bits) == p.q);
    }
  // Each value owns distinct bits: packing one value alone changes only its own field.
  PlainQuant one = constant_quant(64, 16, 3, 0);
  one.q[37 * 16 + 11] = 5;
  CHECK(unpack_native(pack_native(one), 64, 16, 3) == one.q);
}

TEST_CASE("repack awq and gptq to native: bit-exact", "[wq_gemm]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int64_t g : {32, 64, 128}) {
    const PlainQuant p = random_quant(256, 48, g, 4, rng);
    const PlainQuant a = unpack_awq(pack_awq_qweight(p), pack_along_n(p.z, 256 / g, 48, true), 256, 48, g);
    CHECK(a.q == p.q);
    CHECK(a.z == p.z);
    CHECK(unpack_native(pack_native(a), 256, 48, 4) == p.q);
    const PlainQuant q = unpack_gptq(pack_gptq_qweight(p), pack_along_n(p.z, 256 / g, 48, false), 256, 48, g, false);
    CHECK(q.q == p.q);
    CHECK(q.z == p.z);
    const PlainQuant sym = unpack_gptq(pack_gptq_qweight(p), {}, 256, 48, g, true);
    CHECK(sym.z == std::vector<uint8_t>((256 / g) * 48, 8));
  }
  CHECK_THROWS_WITH(unpack_awq(std::vector<uint32_t>(5), {}, 64, 16, 64),
                    Catch::Contains("awq qweight [K, N/8] has 5 int32 words; expected 128"));
  PlainQuant bad = constant_quant(64, 24, 4, 0);
  CHECK_THROWS_WITH(pack_native(bad), Catch::Contains("n=24 must be a multiple of 16"));
}

TEST_CASE("wq_gemm reference: hand-computed cases", "[wq_gemm]") {
  // K = 64, N = 16, x = 1 everywhere: y = Σ_k w.
  auto spec_of = [](const std::string& extra) { return codegen::parse_spec("wq_gemm", "k=64,n=16,g=64," + extra); };
  std::vector<uint8_t> x(2 * 64);
  for (int i = 0; i < 64; ++i) {
    const uint16_t one = float_to_half(1.0f);
    std::memcpy(&x[2 * i], &one, 2);
  }
  PlainQuant p = constant_quant(64, 16, 4, 9);
  p.g = 64;
  p.z.assign(16, 8);
  p.s.assign(16, float_to_half(0.5f));
  p.o.assign(16, float_to_half(0.25f));
  // int: (9 - 8) * 0.5 * 64 = 32; sym (zero 8): the same; float: (9 - 8) * 0.5 + 0.25 -> 48.
  CHECK(wq_gemm_reference(spec_of("zero=int"), {0}, x.data(), p, nullptr)[0] == 32.0);
  CHECK(wq_gemm_reference(spec_of("zero=sym"), {0}, x.data(), p, nullptr)[5] == 32.0);
  CHECK(wq_gemm_reference(spec_of("zero=float"), {0}, x.data(), p, nullptr)[15] == 48.0);
  // bias, then the clamp: 32 - 40 -> relu 0; 32 + 1 -> relu6 6.
  std::vector<uint8_t> bias(2 * 16);
  for (int i = 0; i < 16; ++i) {
    const uint16_t b = float_to_half(i == 0 ? -40.0f : 1.0f);
    std::memcpy(&bias[2 * i], &b, 2);
  }
  auto relu = wq_gemm_reference(spec_of("zero=int,bias=yes,act=relu"), {0}, x.data(), p, bias.data());
  CHECK(relu[0] == 0.0);
  CHECK(relu[1] == 33.0);
  CHECK(wq_gemm_reference(spec_of("zero=int,bias=yes,act=relu6"), {0}, x.data(), p, bias.data())[1] == 6.0);
  // 2 bits, sym: zero 2; q = 0 -> -2 * 0.5 * 64 = -64.
  PlainQuant two = constant_quant(64, 16, 2, 0);
  two.g = 64, two.s = p.s;
  CHECK(wq_gemm_reference(spec_of("zero=sym,bits=2"), {0}, x.data(), two, nullptr)[3] == -64.0);
}

TEST_CASE("wq_gemm specs: bad values are named", "[wq_gemm]") {
  using codegen::parse_spec;
  CHECK_THROWS_WITH(parse_spec("wq_gemm", "k=4096,n=11000"), Catch::Contains("n=11000 is not a multiple of 16"));
  CHECK_THROWS_WITH(parse_spec("wq_gemm", "k=4000,n=4096"), Catch::Contains("k=4000 is not a multiple of 64"));
  CHECK_THROWS_WITH(parse_spec("wq_gemm", "k=4096,n=4096,bits=5"), Catch::Contains("bits=5"));
  CHECK_THROWS_WITH(parse_spec("wq_gemm", "k=4096,n=4096,m=3"), Catch::Contains("m=3 is not a bucket"));
  CHECK_THROWS_WITH(parse_spec("wq_gemm", "k=4096,n=4096,g=96"), Catch::Contains("g=96"));
  CHECK_THROWS_WITH(parse_spec("wq_gemm", "k=192,n=4096,g=128"), Catch::Contains("k=192 is not divisible by g=128"));
  CHECK_THROWS_WITH(parse_spec("wq_gemm", "k=4096,n=4096,layout=awq"), Catch::Contains("qjit repack --from awq"));
  CHECK_THROWS_WITH(parse_spec("wq_gemm", "k=4096,n=4096,layout=gptq,bits=3"),
                    Catch::Contains("layout=gptq holds 4-bit weights only, not bits=3"));
  CHECK_THROWS_WITH(parse_spec("fused_ffn", "d=4096,h=4096,weights=awq"), Catch::Contains("qjit repack --from awq"));
  CHECK(codegen::wq_gemm_bucket(1) == 1);
  CHECK(codegen::wq_gemm_bucket(3) == 4);
  CHECK(codegen::wq_gemm_bucket(16) == 16);
  CHECK(codegen::wq_gemm_bucket(17) == 32);
  CHECK(codegen::wq_gemm_bucket(1000) == 1024);
  CHECK(codegen::wq_gemm_bucket(100000) == 1024);
  // `--m lo-hi` tunes the buckets that serve lo..hi rows
  const auto& op = codegen::find_op("wq_gemm");
  CHECK(op.m_values_for_rows(1, 8) == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(op.m_values_for_rows(3, 20) == std::vector<int64_t>{4, 8, 16, 32});
  CHECK(op.m_values_for_rows(1, 1024).size() == 11);
  CHECK(op.m_values_for_rows(1000, 5000) == std::vector<int64_t>{1024});
  CHECK(codegen::find_op("fused_ffn").m_values_for_rows(2, 4) == std::vector<int64_t>{2, 3, 4});
}

TEST_CASE("wq_gemm: candidates compile for sm_90 without spills", "[wq_gemm][nvrtc]") {
  const auto& op = codegen::find_op("wq_gemm");
  // Every other config of the main shape at M = 1 and every fourth at
  // M = 16 (both hold every key); then every bit width, zero mode and type
  // through each spec's default and a spread of its space. (In CI a quarter
  // of each list, a different quarter each run: test::compile_sample;
  // QJIT_TEST_EXHAUSTIVE=1: the strides as written.)
  std::vector<test::CompileJob> jobs;
  // (Not the spread configs: spread changes the launch, not the kernel; the
  // spread test checks that their sources match.)
  for (const auto& [s, stride] : {std::pair{"k=4096,n=11008,m=1", 2}, std::pair{"k=4096,n=11008,m=16", 4}}) {
    auto space = op.tunable_space(codegen::parse_spec("wq_gemm", s));
    std::erase_if(space, [](const nlohmann::json& c) { return c.value("spread", 0) == 1; });
    const auto sample = test::compile_sample(stride, std::string("wq_gemm ") + s);
    for (size_t i = 0; i < space.size(); ++i)
      if (sample.takes(i)) jobs.push_back({codegen::parse_spec("wq_gemm", s), space[i]});
  }
  // The large-M buckets: a spread of both families.
  for (const char* s : {"k=4096,n=11008,m=64", "k=11008,n=4096,m=256"}) {
    const auto spec = codegen::parse_spec("wq_gemm", s);
    const auto space = op.tunable_space(spec);
    const auto sample = test::compile_sample(6, std::string("wq_gemm ") + s);
    for (size_t i = 0; i < space.size(); ++i)
      if (sample.takes(i)) jobs.push_back({spec, space[i]});
    jobs.push_back({spec, op.default_config(spec)});
  }
  for (const char* s : {"k=64,n=16,bits=2,zero=sym,g=32,m=1", "k=192,n=48,bits=3,zero=float,scales=bf16,x=fp32,m=64,g=64",
                        "k=256,n=32,bits=8,zero=int,x=bf16,bias=yes,act=relu6,m=1024,g=256,residual=yes",
                        "k=192,n=80,bits=3,zero=float,scales=bf16,m=128,g=64"}) {
    const auto spec = codegen::parse_spec("wq_gemm", s);
    const auto space = op.tunable_space(spec);
    REQUIRE(!space.empty());
    jobs.push_back({spec, op.default_config(spec)});
    for (size_t i = 0; i < space.size(); i += 5) jobs.push_back({spec, space[i]});
  }
  // wgmma: a quarter of the main large-M space, and all of an odd number of
  // chunks of k (a stage past k; a split's last block entirely past k).
  for (const auto& [s, stride] : {std::pair{"k=4096,n=11008,m=256", 4},
                                  std::pair{"k=320,n=80,bits=3,zero=float,scales=bf16,x=bf16,m=128,g=64", 1}}) {
    const auto spec = codegen::parse_spec("wq_gemm", s);
    const auto sample = test::compile_sample(stride, std::string("wq_gemm wgmma ") + s);
    size_t i = 0;
    for (const auto& c : op.tunable_space(spec))
      if (c.value("family", "") == "wgmma" && sample.takes(i++)) jobs.push_back({spec, c});
  }
  test::compile_jobs(jobs, "sm_90", "wq_gemm");
  size_t spilling = 0;
  for (const auto& j : jobs) {
    INFO(j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
    REQUIRE(j.error.empty());
    CHECK(j.result.ok);
    CHECK(j.result.ptx.find(".entry qjit_wq_gemm") != std::string::npos);
    // ptxas serialises every wgmma of a kernel with one behind a branch it
    // cannot prove uniform (info C7520): the wgmma kernel must have none.
    CHECK(j.result.log.find("C7520") == std::string::npos);
    // The tuner prunes a spilling candidate before any GPU time, but the
    // default config runs untuned on a runtime miss: it must never spill.
    if (j.config == op.default_config(j.spec)) CHECK(j.result.spill_bytes == 0);
    spilling += j.result.spill_bytes > 0;
  }
  // The register estimate keeps most of the space spill-free; ptxas still
  // trades 12-32 bytes of spill for an occupancy step in a few configs,
  // which the tuner prunes.
  CHECK(spilling * 10 <= jobs.size());
}
