// wq_gemm on the CPU: the native layout against hand-computed words, round
// trips for every bit width, awq/gptq -> native repacking, the reference on
// hand-computed cases, spec errors, and NVRTC compiles of the candidates.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/numeric.h"
#include "codegen/ops/wq_gemm.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "runtime/kernel_cache.h"
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

// `config` with one key set to `value` (for the config-error checks).
// Occurrences of `what` in `text`.
size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

nlohmann::json with_key(nlohmann::json config, const char* key, int value) {
  config[key] = value;
  return config;
}

// The register pipeline at M = 1 without the optional keys (the small-M winner of session 8).
const nlohmann::json kPlainSmallM = {{"warps", 4}, {"split_k", 4}, {"tiles", 2}, {"mtiles", 1}, {"unroll", 3}, {"stages", 0}};
// The same row group streamed through a cp.async ring of 4 stages.
const nlohmann::json kRingSmallM = {{"warps", 4}, {"split_k", 4}, {"tiles", 2}, {"mtiles", 1}, {"unroll", 1}, {"stages", 4}};

// Configs in wq_gemm's space for `shape` whose `key` is `value` (an absent key counts as 0).
// Configs of the small-M mainloop (no "family" key) in the space whose `key` is `value` (absent: 0).
long count_in_space(const char* shape, const char* key, int value) {
  const auto space = codegen::find_op("wq_gemm").tunable_space(codegen::parse_spec("wq_gemm", shape));
  return std::count_if(space.begin(), space.end(),
                       [&](const nlohmann::json& c) { return !c.contains("family") && c.value(key, 0) == value; });
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
  CHECK(codegen::wq_gemm_bucket(1) == 1);
  CHECK(codegen::wq_gemm_bucket(3) == 4);
  CHECK(codegen::wq_gemm_bucket(16) == 16);
  CHECK(codegen::wq_gemm_bucket(17) == 32);
  CHECK(codegen::wq_gemm_bucket(1000) == 1024);
  CHECK(codegen::wq_gemm_bucket(100000) == 1024);
}

TEST_CASE("wq_gemm mma family: the L2 look-ahead key", "[wq_gemm]") {
  const auto& op = codegen::find_op("wq_gemm");
  const auto small = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1");
  const auto& plain = kPlainSmallM;
  const auto ahead = with_key(plain, "l2ahead", 2);
  // Searched 2 chunks ahead at small M, beside every plain config (but those
  // with x in registers, x_regs, chunk pairs, or spread); not beyond m = 16.
  auto count = [](const char* shape, int value) {
    const auto space = codegen::find_op("wq_gemm").tunable_space(codegen::parse_spec("wq_gemm", shape));
    return std::count_if(space.begin(), space.end(), [&](const nlohmann::json& c) {
      return !c.contains("family") && c.value("l2ahead", 0) == value && c.value("x_regs", 0) == 0 &&
             c.value("spread", 0) == 0 && c.value("pair", 0) == 0;
    });
  };
  CHECK(count("k=4096,n=11008,m=1", 2) == count("k=4096,n=11008,m=1", 0));
  CHECK(count("k=4096,n=11008,m=16", 2) == count("k=4096,n=11008,m=16", 0));
  CHECK(count("k=4096,n=11008,m=16", 4) == 0);
  CHECK(count("k=4096,n=11008,m=32", 2) + count("k=4096,n=11008,m=32", 4) == 0);
  const auto space = op.tunable_space(small);
  CHECK(std::find(space.begin(), space.end(), ahead) != space.end());
  CHECK(std::find(space.begin(), space.end(), plain) != space.end());
  // The key reaches the kernel as kL2Ahead; a config without it means 0 (as cached before the key existed).
  op.validate_config(small, ahead);
  CHECK(codegen::generate_source(small, ahead).text.find("kL2Ahead = 2;") != std::string::npos);
  CHECK(codegen::generate_source(small, plain).text.find("kL2Ahead = 0;") != std::string::npos);
  CHECK_THROWS_WITH(op.validate_config(small, with_key(plain, "l2ahead", 3)), Catch::Contains("l2ahead must be 0, 2, 4 or 8"));
  CHECK_THROWS_WITH(op.validate_config(small, with_key(plain, "l2ahed", 2)), Catch::Contains("may have l2ahead"));
}

TEST_CASE("wq_gemm mma family: the zero after the mma", "[wq_gemm]") {
  const auto& op = codegen::find_op("wq_gemm");
  const auto small = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1");
  const auto& plain = kPlainSmallM;
  const auto after = with_key(plain, "zero_after", 1);
  // Searched at small M where it applies (fp16 scales, one group per chunk, an
  // integer zero, 4 or 8 bits), with and without the L2 look-ahead.
  auto count = [](const char* shape) { return count_in_space(shape, "zero_after", 1); };
  CHECK(count("k=4096,n=11008,m=1") > 0);
  CHECK(count("k=4096,n=11008,m=16,bits=8,zero=sym") > 0);
  for (const char* no : {"k=4096,n=11008,m=32", "k=4096,n=11008,m=1,g=32", "k=4096,n=11008,m=1,zero=float",
                         "k=4096,n=11008,m=1,bits=3", "k=4096,n=11008,m=1,bits=2", "k=4096,n=11008,m=1,scales=bf16"})
    CHECK(count(no) == 0);
  const auto space = op.tunable_space(small);
  CHECK(std::find(space.begin(), space.end(), after) != space.end());
  CHECK(std::find(space.begin(), space.end(), with_key(after, "l2ahead", 2)) != space.end());
  op.validate_config(small, after);
  CHECK(codegen::generate_source(small, after).text.find("kZeroAfter = 1;") != std::string::npos);
  CHECK(codegen::generate_source(small, plain).text.find("kZeroAfter = 0;") != std::string::npos);
  CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1,g=32"), after),
                    Catch::Contains("zero_after needs fp16 scales"));
  CHECK_THROWS_WITH(op.validate_config(small, with_key(plain, "zero_after", 2)), Catch::Contains("zero_after must be 0 or 1"));
}

TEST_CASE("wq_gemm mma family: the balanced schedule key", "[wq_gemm][nvrtc]") {
  const auto& op = codegen::find_op("wq_gemm");
  const auto small = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1");
  const auto balanced = with_key(with_key(kPlainSmallM, "zero_after", 1), "balance", 3);  // 4 warps, split 4
  // Legal at m <= 16 for one matrix, but not searched (it lost everywhere on an H100).
  for (int b : {1, 2, 3, 4}) CHECK(count_in_space("k=4096,n=11008,m=1", "balance", b) == 0);
  op.validate_config(small, balanced);
  op.validate_config(codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=16,bits=8"),
                     with_key(with_key(balanced, "mtiles", 2), "balance", 1));
  const auto ffn = codegen::parse_spec("fused_ffn", "d=4096,h=11008,weights=native");
  const auto& ffn_op = codegen::find_op("fused_ffn");
  CHECK_THROWS_WITH(ffn_op.validate_config(ffn, with_key(ffn_op.default_config(ffn), "balance", 1)),
                    Catch::Contains("balance is for one matrix"));
  CHECK(codegen::generate_source(small, balanced).text.find("kBalance = 3;") != std::string::npos);
  // Not in the space, so the space's compile test does not cover it: compiled here (M = 1, and M = 16 at 8 bits).
  for (const auto& [spec, config] :
       {std::pair{small, balanced}, {codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=16,bits=8,zero=sym"),
                                     with_key(with_key(balanced, "mtiles", 2), "balance", 1)}}) {
    const auto built = codegen::compile(codegen::generate_source(spec, config), "sm_90");
    INFO(built.log);
    CHECK(built.ok);
  }
  CHECK(codegen::generate_source(small, kPlainSmallM).text.find("kBalance = 0;") != std::string::npos);
  // A persistent grid of 3 blocks per SM, and the workspace: a counter per
  // row group of 2 tiles (344, in 256-byte lines), two pieces of warp 0's
  // 8 accumulators per lane per block.
  const auto g = op.launch_geometry(small, balanced);
  CHECK(g.grid_per_sm == 3);
  CHECK(g.block[0] == 128);
  CHECK(g.workspace_param == 8);
  CHECK(g.workspace_fixed == 1536);
  CHECK(g.workspace_per_block == 2 * 8 * 32 * 4);
  // The parameter is there in every mma kernel (null without balance).
  const auto plain_geometry = op.launch_geometry(small, kPlainSmallM);
  CHECK(plain_geometry.workspace_param == 8);
  CHECK(plain_geometry.workspace_fixed + plain_geometry.workspace_per_block == 0);
  CHECK(plain_geometry.grid_per_sm == 0);
  CHECK_THROWS_WITH(op.validate_config(small, with_key(balanced, "balance", 5)), Catch::Contains("balance must be 0"));
  CHECK_THROWS_WITH(op.validate_config(small, with_key(balanced, "split_k", 2)),
                    Catch::Contains("balance takes one row group per block"));
  CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=32"), with_key(balanced, "mtiles", 4)),
                    Catch::Contains("balance is for m <= 16"));
  CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=16"), balanced),
                    Catch::Contains("mtiles 2"));
  CHECK_THROWS_WITH(op.validate_config(small, with_key(with_key(balanced, "warps", 8), "split_k", 8)),
                    Catch::Contains("do not fit one SM"));
}

TEST_CASE("wq_gemm mma family: chunk pairs sharing a group's scale (pair)", "[wq_gemm][nvrtc]") {
  const auto& op = codegen::find_op("wq_gemm");
  const auto small = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1");
  const auto paired = with_key(with_key(kRingSmallM, "pair", 1), "stages", 2);
  op.validate_config(small, paired);
  // Beside every ring with x in its slots and no look-ahead at m <= 16 (the
  // zero after the mma included, and the min_blocks and spread twins), for
  // both wq_gemm and the quantized FFN; not beyond m = 16. A slot holds a
  // pair: a ring of 4 stages has twins of 2 and 3 slots, of 8 stages one of 4.
  for (const char* shape : {"k=4096,n=11008,m=1", "k=4096,n=11008,m=16"}) {
    INFO(shape);
    const auto space = op.tunable_space(codegen::parse_spec("wq_gemm", shape));
    std::map<int, long> rings, pairs;  // by stages
    for (const auto& c : space) {
      if (c.contains("family") || c.value("stages", 0) == 0 || c.value("x_regs", 0) || c.value("l2ahead", 0))
        continue;
      (c.value("pair", 0) ? pairs : rings)[c["stages"].get<int>()] += 1;
    }
    CHECK(rings[4] > 0);
    CHECK(pairs[2] == rings[4]);
    CHECK(pairs[3] > 0);
    CHECK(pairs[3] <= rings[4]);  // at m = 16 some need more shared memory than a block may take
    CHECK(pairs[4] == rings[8]);
    CHECK(pairs.size() == 3);
  }
  // A slot holds both chunks' weights and x, and their one group's scales and zeros.
  CHECK(op.launch_geometry(small, paired).dynamic_smem == 4 * 2 * (2 * (2 * 4 * 128 + 128) + 2 * 16 * 3));
  CHECK(op.launch_geometry(small, with_key(kRingSmallM, "stages", 2)).dynamic_smem == 4 * 2 * (2 * 4 * 128 + 128 + 2 * 16 * 3));
  CHECK(count_in_space("k=4096,n=11008,m=32", "pair", 1) == 0);
  const auto ffn = codegen::parse_spec("fused_ffn", "d=4096,h=11008,weights=native");
  const auto ffn_space = codegen::find_op("fused_ffn").tunable_space(ffn);
  CHECK(std::any_of(ffn_space.begin(), ffn_space.end(), [](const nlohmann::json& c) { return c.value("pair", 0) == 1; }));
  CHECK(codegen::generate_source(small, paired).text.find("kPair = 1;") != std::string::npos);
  CHECK(codegen::generate_source(small, kRingSmallM).text.find("kPair = 0;") != std::string::npos);
  // A pair shares one group's scale: 128 | g, an integer or no zero, x in the ring's slots.
  for (const char* shape : {"k=4096,n=11008,m=1,g=64", "k=4096,n=11008,m=1,zero=float", "k=4096,n=11008,m=1,g=32"}) {
    INFO(shape);
    CHECK_THROWS_WITH(op.validate_config(codegen::parse_spec("wq_gemm", shape), paired),
                      Catch::Contains("pair needs g a multiple of 128"));
  }
  op.validate_config(codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1,g=4096,zero=sym"), paired);
  op.validate_config(small, with_key(paired, "zero_after", 1));
  for (const auto& [key, value] : {std::pair{"l2ahead", 2}, {"balance", 1}})
    CHECK_THROWS_WITH(op.validate_config(small, with_key(paired, key, value)), Catch::Contains("pair is a mode of the cp.async ring"));
  CHECK_THROWS_WITH(op.validate_config(small, with_key(kPlainSmallM, "pair", 1)), Catch::Contains("pair is a mode of the cp.async ring"));
  CHECK_THROWS_WITH(op.validate_config(small, with_key(kRingSmallM, "pair", 2)), Catch::Contains("pair must be 0 or 1"));
  // Compiled here with one group over k (the space's compile test holds the g = 128 ones).
  const auto built = codegen::compile(
      codegen::generate_source(codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1,g=4096,zero=sym"), paired), "sm_90");
  INFO(built.log);
  CHECK(built.ok);
  CHECK(built.spill_bytes == 0);
}

TEST_CASE("wq_gemm mma family: the launch bounds key", "[wq_gemm]") {
  const auto& op = codegen::find_op("wq_gemm");
  const auto small = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1");
  const auto one = with_key(kPlainSmallM, "min_blocks", 1);
  // Every small-M config of wq_gemm twice; not beyond m = 16, not for fused_ffn.
  CHECK(count_in_space("k=4096,n=11008,m=1", "min_blocks", 1) == count_in_space("k=4096,n=11008,m=1", "min_blocks", 0));
  CHECK(count_in_space("k=4096,n=11008,m=16", "min_blocks", 1) == count_in_space("k=4096,n=11008,m=16", "min_blocks", 0));
  CHECK(count_in_space("k=4096,n=11008,m=32", "min_blocks", 1) == 0);
  for (const auto& c : codegen::find_op("fused_ffn").tunable_space(
           codegen::parse_spec("fused_ffn", "d=4096,h=11008,weights=native")))
    CHECK_FALSE(c.contains("min_blocks"));
  op.validate_config(small, one);
  // The kernel's attribute: one block named, none, or the balanced grid's.
  CHECK(codegen::generate_source(small, one).text.find("#define QJIT_WQ_BOUNDS __launch_bounds__(kThreads, 1)") !=
        std::string::npos);
  CHECK(codegen::generate_source(small, kPlainSmallM).text.find("#define QJIT_WQ_BOUNDS __launch_bounds__(kThreads) ") !=
        std::string::npos);
  const auto balanced = with_key(kPlainSmallM, "balance", 3);
  CHECK(codegen::generate_source(small, balanced).text.find("__launch_bounds__(kThreads, kBalance)") != std::string::npos);
  CHECK_THROWS_WITH(op.validate_config(small, with_key(kPlainSmallM, "min_blocks", 2)), Catch::Contains("min_blocks must be 0 or 1"));
  CHECK_THROWS_WITH(op.validate_config(small, with_key(balanced, "min_blocks", 1)), Catch::Contains("balance names its own"));
}

TEST_CASE("wq_gemm mma family: the cp.async ring in dynamic shared memory, x through L1", "[wq_gemm][nvrtc]") {
  const auto& op = codegen::find_op("wq_gemm");
  const auto m4 = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=4");
  const nlohmann::json ring = {{"warps", 8}, {"split_k", 8}, {"tiles", 2}, {"mtiles", 1}, {"unroll", 1}, {"stages", 4}};
  // A slot: 2 tiles × 4 bits × 32 lanes × 4 bytes of weights, 2 tiles × 16
  // rows of fp16 scales and zero bytes, 4 rows × 64 k of fp16 x; 8 warps ×
  // 4 slots = 52224 bytes, over the 48 KB a static array may take.
  const unsigned slot = 2 * 4 * 32 * 4 + 2 * 16 * (2 + 1) + 4 * 64 * 2;
  op.validate_config(m4, ring);
  CHECK(op.launch_geometry(m4, ring).dynamic_smem == 8 * 4 * slot);
  CHECK(8 * 4 * slot > 48 * 1024);
  CHECK(op.launch_geometry(m4, kPlainSmallM).dynamic_smem == 0);  // the register pipeline has no ring
  // The quantized FFN's kernels share the mainloop and its geometry.
  const auto ffn = codegen::parse_spec("fused_ffn", "d=4096,h=11008,weights=native,m=4");
  const auto& ffn_op = codegen::find_op("fused_ffn");
  for (const auto& c : ffn_op.tunable_space(ffn)) {
    INFO(c.dump());
    const unsigned stages = c.value("stages", 0u);
    CHECK((ffn_op.launch_geometry(ffn, c).dynamic_smem > 0) == (stages > 0));
  }
  // Rings of 8 warps at m = 8 and 16 (x's rows double a slot) are now in the
  // space, with 3 stages from m = 8 on.
  CHECK(count_in_space("k=4096,n=11008,m=16", "stages", 4) > 0);
  CHECK(count_in_space("k=4096,n=11008,m=8", "stages", 3) > 0);
  // Below m = 8 only pairs have 3 slots (the twins of a ring of 4 chunks).
  long plain3 = 0, pair3 = 0;
  for (const auto& c : op.tunable_space(m4))
    if (c.value("stages", 0) == 3) (c.value("pair", 0) ? pair3 : plain3) += 1;
  CHECK(plain3 == 0);
  CHECK(pair3 > 0);
  // 160 KB at most (every GPU qjit targets can opt in to that much);
  // 48 KB with the balanced schedule, whose blocks get a quarter of an SM.
  const auto m16 = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=16");
  auto huge = with_key(with_key(with_key(ring, "tiles", 4), "mtiles", 2), "stages", 8);
  CHECK_THROWS_WITH(op.validate_config(m16, huge), Catch::Contains("(limit 160)"));
  CHECK_THROWS_WITH(op.validate_config(m4, with_key(with_key(ring, "balance", 1), "stages", 8)),
                    Catch::Contains("balance: split-k reduction and cp.async ring need more than 48 KB"));
  CHECK_THROWS_WITH(op.validate_config(m4, with_key(ring, "stages", 5)), Catch::Contains("stages must be 0, 2, 3, 4 or 8"));
  // The kernel checks the launch's shared memory against its ring, copies
  // x with cp.async.ca (through L1) and the weights with cp.async.cg.
  const auto built = codegen::compile(codegen::generate_source(m4, ring), "sm_90");
  INFO(built.log);
  REQUIRE(built.ok);
  CHECK(built.ptx.find("%dynamic_smem_size") != std::string::npos);
  CHECK(built.ptx.find("cp.async.ca.shared.global") != std::string::npos);
  CHECK(built.ptx.find("cp.async.cg.shared.global") != std::string::npos);
  CHECK(codegen::generate_source(m4, ring).text.find("kRingBytes = kStages > 0 ? kWarps * kStages * kSlotWords * 4 : 0;") !=
        std::string::npos);
}

TEST_CASE("wq_gemm mma family: x in registers beside the ring (x_regs)", "[wq_gemm][nvrtc]") {
  const auto& op = codegen::find_op("wq_gemm");
  const auto m8 = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=8");
  const nlohmann::json ring = {{"warps", 8}, {"split_k", 8}, {"tiles", 2}, {"mtiles", 1}, {"unroll", 1}, {"stages", 4}};
  const auto regs = with_key(ring, "x_regs", 1);
  op.validate_config(m8, regs);
  // The slots lose x's 8 rows × 64 k × 2 bytes.
  const unsigned weights_scales_zeros = 2 * 4 * 32 * 4 + 2 * 16 * (2 + 1);
  CHECK(op.launch_geometry(m8, ring).dynamic_smem == 8 * 4 * (weights_scales_zeros + 8 * 64 * 2));
  CHECK(op.launch_geometry(m8, regs).dynamic_smem == 8 * 4 * weights_scales_zeros);
  // Searched with the ring from m = 4 to 16; never without it.
  CHECK(count_in_space("k=4096,n=11008,m=1", "x_regs", 1) == 0);
  CHECK(count_in_space("k=4096,n=11008,m=32", "x_regs", 1) == 0);
  for (const char* shape : {"k=4096,n=11008,m=4", "k=4096,n=11008,m=8", "k=4096,n=11008,m=16"}) {
    INFO(shape);
    CHECK(count_in_space(shape, "x_regs", 1) > 0);
    for (const auto& c : op.tunable_space(codegen::parse_spec("wq_gemm", shape)))
      if (c.value("x_regs", 0) == 1) CHECK(c.value("stages", 0) > 0);
  }
  // With pair, a slot holds two chunks' weights and their one group's scales
  // and zeros, and x stays out of it; searched as the x_regs ring's pair twins.
  const auto regs_pair = with_key(with_key(regs, "pair", 1), "stages", 2);
  op.validate_config(m8, regs_pair);
  CHECK(op.launch_geometry(m8, regs_pair).dynamic_smem == 8 * 2 * (2 * 2 * 4 * 32 * 4 + 2 * 16 * (2 + 1)));
  for (const char* shape : {"k=4096,n=11008,m=4", "k=4096,n=11008,m=16"}) {
    INFO(shape);
    long pairs = 0;
    for (const auto& c : op.tunable_space(codegen::parse_spec("wq_gemm", shape)))
      pairs += c.value("x_regs", 0) == 1 && c.value("pair", 0) == 1;
    CHECK(pairs > 0);
  }
  CHECK(codegen::generate_source(m8, regs_pair).text.find("kXRegs = 1;") != std::string::npos);
  CHECK_THROWS_WITH(op.validate_config(m8, with_key(kPlainSmallM, "x_regs", 1)),
                    Catch::Contains("x_regs is a mode of the cp.async ring"));
  CHECK_THROWS_WITH(op.validate_config(m8, with_key(ring, "x_regs", 2)), Catch::Contains("x_regs must be 0 or 1"));
  // x is read with ld.global.nc (through L1), never copied into the ring;
  // the weights still are. Without the key, x is copied with cp.async.ca.
  const auto built = codegen::compile(codegen::generate_source(m8, regs), "sm_90");
  INFO(built.log);
  REQUIRE(built.ok);
  CHECK(codegen::generate_source(m8, regs).text.find("kXRegs = 1;") != std::string::npos);
  CHECK(built.ptx.find("cp.async.ca.shared.global") == std::string::npos);
  CHECK(built.ptx.find("cp.async.cg.shared.global") != std::string::npos);
  CHECK(built.ptx.find("ld.global.nc.v4") != std::string::npos);
  // The quantized FFN shares the mainloop, so the key reaches its space too.
  const auto ffn = codegen::parse_spec("fused_ffn", "d=4096,h=11008,weights=native,m=8");
  const auto ffn_space = codegen::find_op("fused_ffn").tunable_space(ffn);
  CHECK(std::count_if(ffn_space.begin(), ffn_space.end(), [](const nlohmann::json& c) { return c.value("x_regs", 0) == 1; }) > 0);
}

TEST_CASE("wq_gemm mma family: spread, at most ceil(blocks / SMs) blocks per SM", "[wq_gemm]") {
  const auto& op = codegen::find_op("wq_gemm");
  const auto m16 = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=16");
  const nlohmann::json ring = {{"warps", 4}, {"split_k", 4}, {"tiles", 2}, {"mtiles", 2}, {"unroll", 1}, {"stages", 4},
                               {"x_regs", 1}};
  const auto spread = with_key(ring, "spread", 1);
  op.validate_config(m16, spread);
  // Searched beside every plain ring (no look-ahead, no zero after) from m = 1
  // to 16, never with the register pipeline, beyond m = 16 or for fused_ffn.
  for (const char* shape : {"k=4096,n=11008,m=1", "k=4096,n=11008,m=16"}) {
    INFO(shape);
    const auto space = op.tunable_space(codegen::parse_spec("wq_gemm", shape));
    long rings = 0, spread_rings = 0;
    for (const auto& c : space) {
      if (c.value("stages", 0) == 0 || c.value("l2ahead", 0) || c.value("zero_after", 0)) {
        CHECK(c.value("spread", 0) == 0);
        continue;
      }
      (c.value("spread", 0) ? spread_rings : rings) += 1;
    }
    CHECK(rings > 0);
    CHECK(spread_rings == rings);
  }
  CHECK(count_in_space("k=4096,n=11008,m=32", "spread", 1) == 0);
  for (const auto& c : codegen::find_op("fused_ffn").tunable_space(
           codegen::parse_spec("fused_ffn", "d=4096,h=11008,weights=native,m=8")))
    CHECK_FALSE(c.contains("spread"));
  // The same kernel (the sources differ only in the comment naming the
  // config); the launch asks the runtime to spread it.
  auto strip = [](std::string t) {
    std::string out;
    size_t at = 0;
    while (at < t.size()) {
      const size_t end = std::min(t.find('\n', at), t.size());
      const std::string line = t.substr(at, end - at);
      if (line.rfind("// config:", 0) != 0 && line.rfind("// Regenerate:", 0) != 0) out += line + "\n";
      at = end + 1;
    }
    return out;
  };
  CHECK(strip(codegen::generate_source(m16, spread).text) == strip(codegen::generate_source(m16, ring).text));
  CHECK(op.launch_geometry(m16, spread).spread);
  CHECK_FALSE(op.launch_geometry(m16, ring).spread);
  CHECK(op.launch_geometry(m16, spread).dynamic_smem == op.launch_geometry(m16, ring).dynamic_smem);
  CHECK_THROWS_WITH(op.validate_config(m16, with_key(ring, "spread", 2)), Catch::Contains("spread must be 0 or 1"));
  CHECK_THROWS_WITH(op.validate_config(m16, with_key(with_key(kPlainSmallM, "balance", 2), "spread", 1)),
                    Catch::Contains("balance places its own blocks"));
  // The runtime's share (H100: 228 KB per SM, 227 KB per block, 1 KB kept
  // per block): 344 blocks on 132 SMs are 3 per SM at most.
  const runtime::SmemBudget h100{233472, 232448, 1024, 8192};
  CHECK(runtime::smem_share_for(3, h100) == 233472 / 3 - 1024 - 8192 - 128);
  CHECK(runtime::smem_share_for(1, h100) == 233472 - 1024 - 8192 - 128);
  CHECK(runtime::smem_share_for(0, h100) == runtime::smem_share_for(1, h100));
  const runtime::SmemBudget roomy{300000, 232448, 1024, 8192};  // never more than one block may ask for
  CHECK(runtime::smem_share_for(1, roomy) == 232448 - 8192);
  CHECK(runtime::smem_share_for(64, h100) == 0);  // static memory already past the share
}

TEST_CASE("wq_gemm mma family: the timeline marks (per warp) compile in only for qjit_timeline_probe", "[wq_gemm][nvrtc]") {
  const auto spec = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=1");
  for (const nlohmann::json& c :
       {nlohmann::json{{"warps", 8}, {"split_k", 8}, {"tiles", 2}, {"mtiles", 1}, {"unroll", 1}, {"stages", 4}}, kPlainSmallM}) {
    auto src = codegen::generate_source(spec, c);
    const auto plain = codegen::compile(src, "sm_90");
    REQUIRE(plain.ok);
    CHECK(plain.ptx.find("qjit_timeline") == std::string::npos);  // the marks are empty by default
    src.text = "#define QJIT_TIMELINE 1\n" + src.text;  // as tests/probe/timeline_probe.cpp builds it
    const auto marked = codegen::compile(src, "sm_90");
    INFO(marked.log);
    REQUIRE(marked.ok);
    CHECK(marked.ptx.find("qjit_timeline_runs") != std::string::npos);
    CHECK(marked.ptx.find("%globaltimer") != std::string::npos);
    // A run count per warp of 4096 blocks × 16 warps, and 8 runs of their five marks.
    CHECK(marked.ptx.find("qjit_timeline_runs[262144]") != std::string::npos);
    CHECK(marked.ptx.find("qjit_timeline[20971520]") != std::string::npos);
  }
}

TEST_CASE("wq_gemm tiled family: configs, errors, grid and shared memory", "[wq_gemm]") {
  using codegen::parse_spec;
  const auto& op = codegen::find_op("wq_gemm");
  const auto big = parse_spec("wq_gemm", "k=4096,n=11008,m=256");
  // Both families are searched from m = 32; the tiled one not below, nor for fp32 x.
  auto tiled_count = [&](const char* shape) {
    const auto space = op.tunable_space(parse_spec("wq_gemm", shape));
    return std::count_if(space.begin(), space.end(), [](const nlohmann::json& c) { return c.value("family", "") == "tiled"; });
  };
  CHECK(tiled_count("k=4096,n=11008,m=256") > 0);
  CHECK(tiled_count("k=4096,n=11008,m=16") == 0);
  CHECK(tiled_count("k=4096,n=11008,m=256,x=fp32") == 0);
  // The default is tiled from m = 256 on and in the space.
  const auto def = op.default_config(big);
  CHECK(def.value("family", "") == "tiled");
  const auto space = op.tunable_space(big);
  CHECK(std::find(space.begin(), space.end(), def) != space.end());
  CHECK_FALSE(op.default_config(parse_spec("wq_gemm", "k=4096,n=11008,m=64")).contains("family"));
  // Geometry: x over blocks of 8·wm·warps_m rows, y over 16·wn·warps_n rows of n; ring in dynamic smem.
  const nlohmann::json c = {{"family", "tiled"}, {"warps_n", 2}, {"warps_m", 2}, {"warps_k", 2},
                            {"wn", 2},           {"wm", 4},      {"stages", 3}};
  op.validate_config(big, c);
  const auto g = op.launch_geometry(big, c);
  CHECK(g.grid[0] == 256 / 64);
  CHECK(g.grid[1] == (11008 + 63) / 64);
  CHECK(g.block[0] == 8 * 32);
  // per chunk: 4 tiles × (32 weight pieces + 2 scale + 1 zero) + 64 rows × 9; × 2 chunks × 3 stages;
  // then two stages of 2 chunks' 4 tiles dequantised, 4 pieces per lane
  CHECK(g.dynamic_smem == 3 * 2 * (4 * 35 + 64 * 9) * 16 + 2 * 2 * 4 * 4 * 32 * 16);
  // Errors name the bad key or value.
  auto bad = [&](const char* key, int value) { return with_key(c, key, value); };
  CHECK_THROWS_WITH(op.validate_config(big, bad("wn", 3)), Catch::Contains("wn must be 1, 2 or 4"));
  CHECK_THROWS_WITH(op.validate_config(big, bad("stages", 6)), Catch::Contains("stages must be 3 or 4"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("wq_gemm", "k=4096,n=11008,m=32"), bad("wm", 8)),
                    Catch::Contains("more rows of x than the bucket m=32"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("wq_gemm", "k=4096,n=11008,m=256,x=fp32"), c),
                    Catch::Contains("16-bit x"));
  nlohmann::json missing = c;
  missing.erase("warps_k");
  CHECK_THROWS_WITH(op.validate_config(big, missing), Catch::Contains("warps_k"));
  const nlohmann::json heavy = {{"family", "tiled"}, {"warps_n", 4}, {"warps_m", 4}, {"warps_k", 1},
                                {"wn", 4},           {"wm", 4},      {"stages", 3}};  // 16 warps: 128 registers each
  CHECK_THROWS_WITH(op.validate_config(big, heavy), Catch::Contains("registers"));
}

TEST_CASE("wq_gemm wgmma family: configs, errors, sm_90a only", "[wq_gemm][nvrtc]") {
  using codegen::parse_spec;
  const auto& op = codegen::find_op("wq_gemm");
  const auto big = parse_spec("wq_gemm", "k=4096,n=11008,m=256");
  // A in registers at 4 bits is searched only in natural order (a_quad).
  const nlohmann::json c = {{"family", "wgmma"}, {"groups", 2}, {"rows", 128}, {"stages", 3}, {"chunks", 2}, {"a_quad", 1}};
  const auto space = op.tunable_space(big);
  CHECK(std::find(space.begin(), space.end(), c) != space.end());
  auto without = [](nlohmann::json j, const char* key) {
    j.erase(key);
    return j;
  };
  // Not below m = 64 (rows of x per block are 64 at least), nor for x of
  // another type than the scales (x is copied unconverted).
  auto wgmma_count = [&](const char* shape) {
    const auto sp = op.tunable_space(parse_spec("wq_gemm", shape));
    return std::count_if(sp.begin(), sp.end(), [](const nlohmann::json& j) { return j.value("family", "") == "wgmma"; });
  };
  CHECK(wgmma_count("k=4096,n=11008,m=32") == 0);
  CHECK(wgmma_count("k=4096,n=11008,m=256,x=fp32") == 0);
  CHECK(wgmma_count("k=4096,n=11008,m=256,x=bf16") == 0);
  CHECK(wgmma_count("k=4096,n=11008,m=256,x=bf16,scales=bf16") > 0);
  // Grid: x over blocks of `rows` rows of x, y over 64·groups rows of n.
  // Shared memory: per stage the ring's weights, scales and zeros (35 pieces
  // per tile and chunk) and two chunks of sB, plus 1024 bytes of alignment.
  const auto g = op.launch_geometry(big, c);
  CHECK(g.grid[0] == 2);
  CHECK(g.grid[1] == (11008 + 127) / 128);
  CHECK(g.block[0] == 256);
  CHECK(g.dynamic_smem == 3 * (2 * 8 * 35 * 16 + 2 * 128 * 128) + 1024);
  auto bad = [&](const char* key, int value) { return with_key(c, key, value); };
  CHECK_THROWS_WITH(op.validate_config(big, bad("rows", 96)), Catch::Contains("rows must be 64, 128 or 256"));
  CHECK_THROWS_WITH(op.validate_config(big, bad("groups", 3)), Catch::Contains("groups must be 1 or 2"));
  CHECK_THROWS_WITH(op.validate_config(big, bad("chunks", 4)), Catch::Contains("chunks must be 1 or 2"));
  CHECK_THROWS_WITH(op.validate_config(big, bad("split", 5)), Catch::Contains("split must be 1, 2, 3 or 4"));
  CHECK_THROWS_WITH(op.validate_config(big, bad("producer", 2)), Catch::Contains("producer must be 0 or 1"));
  CHECK_THROWS_WITH(op.validate_config(big, bad("a_smem", 2)), Catch::Contains("a_smem must be 0 or 1"));
  CHECK_THROWS_WITH(op.validate_config(big, bad("producer", 1)), Catch::Contains("takes rows <= 128 and chunks=1"));
  // producer: a third warpgroup (the block grows by 128 threads); absent when 0.
  nlohmann::json producer = bad("producer", 1);
  producer["chunks"] = 1;
  CHECK(std::find(space.begin(), space.end(), producer) != space.end());
  CHECK(std::find(space.begin(), space.end(), bad("producer", 0)) == space.end());
  CHECK(op.launch_geometry(big, producer).block[0] == 384);
  CHECK(codegen::generate_source(big, producer).text.find("kProducer = 1;") != std::string::npos);
  CHECK_THROWS_WITH(op.validate_config(parse_spec("wq_gemm", "k=256,n=11008,m=256"), bad("split", 3)),
                    Catch::Contains("split × chunks exceeds"));
  // split: a cluster along z; the key is written only when it is not 1, so
  // configs cached before it exist mean what they meant.
  const auto split = bad("split", 3);
  CHECK(std::find(space.begin(), space.end(), split) != space.end());
  CHECK(std::find(space.begin(), space.end(), bad("split", 1)) == space.end());
  const auto gs = op.launch_geometry(big, split);
  CHECK(gs.grid[2] == 3);
  CHECK(gs.dynamic_smem == g.dynamic_smem);  // the ring (126 KB) outgrows the sums (256 threads × 64 floats)
  const nlohmann::json wide = {{"family", "wgmma"}, {"groups", 2}, {"rows", 256}, {"stages", 3}, {"chunks", 1}, {"split", 2}};
  CHECK(op.launch_geometry(big, wide).dynamic_smem == 256 * 128 * 4);  // the sums outgrow the ring
  // a_smem: two stages of sA per warpgroup (64 rows × 128 bytes per chunk)
  // on top of the ring; absent when 0. With A out of registers, one
  // warpgroup holds 256 rows of accumulators.
  const auto a_smem = without(bad("a_smem", 1), "a_quad");
  CHECK(std::find(space.begin(), space.end(), a_smem) != space.end());
  CHECK(std::find(space.begin(), space.end(), with_key(a_smem, "a_smem", 0)) == space.end());
  CHECK(op.launch_geometry(big, a_smem).dynamic_smem == g.dynamic_smem + 2 * 2 * 2 * 64 * 128);
  CHECK(codegen::generate_source(big, a_smem).text.find("kASmem = true;") != std::string::npos);
  nlohmann::json one_group_256 = {{"family", "wgmma"}, {"groups", 1}, {"rows", 256}, {"stages", 3}, {"chunks", 1}};
  CHECK_THROWS_WITH(op.validate_config(big, one_group_256), Catch::Contains("rows=256 with A in registers needs groups=2"));
  one_group_256["a_smem"] = 1;
  CHECK(std::find(space.begin(), space.end(), one_group_256) != space.end());
  // stream: a persistent grid (grid_per_sm) with the runtime's workspace (a
  // flag per output tile, one piece of sums per block); absent when 0; no
  // split. The open 1024 bucket's flags cover 8192 rows of x (the kernel
  // takes whole tiles past them).
  const auto stream = bad("stream", 1);
  CHECK(std::find(space.begin(), space.end(), stream) != space.end());
  CHECK(std::find(space.begin(), space.end(), bad("stream", 0)) == space.end());
  CHECK_THROWS_WITH(op.validate_config(big, bad("stream", 4)), Catch::Contains("stream must be 0"));
  nlohmann::json stream_split = stream;
  stream_split["split"] = 2;
  CHECK_THROWS_WITH(op.validate_config(big, stream_split), Catch::Contains("split must be 1"));
  const auto open_bucket = parse_spec("wq_gemm", "k=4096,n=11008,m=1024");
  CHECK_NOTHROW(op.validate_config(open_bucket, stream));
  CHECK(op.launch_geometry(open_bucket, stream).workspace_fixed == 86 * 64 * 4);  // 64 m-blocks of 128 rows
  CHECK(codegen::generate_source(open_bucket, stream).text.find("kStreamRows = 8192;") != std::string::npos);
  CHECK(codegen::generate_source(big, stream).text.find("kStreamRows = 256;") != std::string::npos);
  const auto gst = op.launch_geometry(big, stream);
  CHECK(gst.grid_per_sm == 1);
  CHECK(gst.dynamic_smem == g.dynamic_smem);
  CHECK(gst.workspace_param == 8);
  CHECK(gst.workspace_fixed == (86 * 2 * 4 + 255) / 256 * 256);  // 86 n-blocks × 2 m-blocks of 128 rows
  CHECK(gst.workspace_per_block == 256 * 64 * 4);                 // 256 threads × 64 accumulators
  CHECK(g.workspace_fixed + g.workspace_per_block == 0);          // the grid schedules take none
  // Two or three blocks per SM only where their shared memory fits that many.
  for (const auto& j : space)
    if (j.value("family", "") == "wgmma" && j.value("stream", 0) > 1)
      CHECK((op.launch_geometry(big, j).dynamic_smem + 1152) * j.at("stream").get<int>() <= 228 * 1024);
  const auto stream_src = codegen::generate_source(big, stream);
  CHECK(stream_src.text.find("kStream = 1;") != std::string::npos);
  // a_quad: A in registers traded into natural k order (4-bit only), x
  // copied 16 bytes at a time; absent when 0; not with a_smem. At 4 bits the
  // permuted order (x copied 4 bytes at a time) stays legal but unsearched;
  // other widths search only it.
  const auto permuted = without(c, "a_quad");
  CHECK_NOTHROW(op.validate_config(big, permuted));
  CHECK(std::find(space.begin(), space.end(), permuted) == space.end());
  CHECK(std::find(space.begin(), space.end(), bad("a_quad", 0)) == space.end());
  const auto big8 = parse_spec("wq_gemm", "k=4096,n=11008,m=256,bits=8");
  const auto space8 = op.tunable_space(big8);
  CHECK(std::find(space8.begin(), space8.end(), permuted) != space8.end());
  CHECK_THROWS_WITH(op.validate_config(big8, c), Catch::Contains("bits must be 4"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(c, "a_smem", 1)), Catch::Contains("a_smem must be 0"));
  CHECK(op.launch_geometry(big, permuted).dynamic_smem == g.dynamic_smem);
  const auto permuted_ptx = codegen::compile(codegen::generate_source(big, permuted), "sm_90");
  REQUIRE(permuted_ptx.ok);
  CHECK(permuted_ptx.ptx.find("cp.async.ca.shared.global") != std::string::npos);  // x 4 bytes at a time
  // Under ws, where the producer issues those copies and the consumers skip the trade, the permuted
  // order is searched at 4 bits too, up to 128 rows (x's copies: 4 bytes each).
  const nlohmann::json ws_permuted = {{"family", "wgmma"}, {"groups", 2}, {"rows", 64},  {"stages", 4},
                                      {"chunks", 2},       {"producer", 1}, {"stream", 1}, {"ws", 1}};
  CHECK(std::find(space.begin(), space.end(), ws_permuted) != space.end());
  CHECK(std::find(space.begin(), space.end(), with_key(with_key(ws_permuted, "rows", 256), "chunks", 1)) ==
        space.end());
  CHECK_NOTHROW(op.validate_config(big, with_key(with_key(ws_permuted, "rows", 256), "chunks", 1)));
  const auto ws_permuted_ptx = codegen::compile(codegen::generate_source(big, ws_permuted), "sm_90");
  REQUIRE(ws_permuted_ptx.ok);
  CHECK(ws_permuted_ptx.ptx.find("cp.async.ca.shared.global") != std::string::npos);  // x 4 bytes at a time
  CHECK(ws_permuted_ptx.ptx.find("shfl.sync.bfly") == std::string::npos);             // and no trade
  CHECK(ws_permuted_ptx.spill_bytes == 0);
  // ... and with the weights, scales and zeros by the tensor copy engine (tma_w without tma_x: their
  // maps are the only ones, right after the workspace; x still copied 4 bytes at a time).
  const auto ws_permuted_w = with_key(ws_permuted, "tma_w", 1);
  CHECK(std::find(space.begin(), space.end(), ws_permuted_w) != space.end());
  const auto gpw = op.launch_geometry(big, ws_permuted_w);
  REQUIRE(gpw.tensor_maps.size() == 3);
  CHECK((gpw.tensor_maps[0].source == 1 && gpw.tensor_maps[1].source == 2 && gpw.tensor_maps[2].source == 3));
  const auto ws_permuted_w_ptx = codegen::compile(codegen::generate_source(big, ws_permuted_w), "sm_90");
  INFO(ws_permuted_w_ptx.log);
  REQUIRE(ws_permuted_w_ptx.ok);
  CHECK(ws_permuted_w_ptx.ptx.find(".param .align 64 .b8 qjit_wq_gemm_param_11[128]") != std::string::npos);
  CHECK(ws_permuted_w_ptx.ptx.find("qjit_wq_gemm_param_12") == std::string::npos);
  CHECK(ws_permuted_w_ptx.ptx.find("cp.async.bulk.tensor.3d") != std::string::npos);
  CHECK(ws_permuted_w_ptx.ptx.find("cp.async.ca.shared.global") != std::string::npos);
  CHECK(ws_permuted_w_ptx.ptx.find("cp.async.cg.shared.global") == std::string::npos);  // no 16-byte copies
  CHECK(ws_permuted_w_ptx.spill_bytes == 0);
  // ws: warp specialisation of the producer (mbarriers per ring slot, setmaxnreg); absent when 0;
  // needs the producer and no split. It lifts the producer's register limit: two consumer
  // warpgroups of 256 rows get 224 registers each.
  // Searched with x by the tensor copy engine (tma_x, below) only, in natural order.
  const auto ws = with_key(with_key(producer, "ws", 1), "rows", 256);
  CHECK_NOTHROW(op.validate_config(big, ws));
  CHECK(std::find(space.begin(), space.end(), ws) == space.end());
  CHECK(std::find(space.begin(), space.end(), with_key(ws, "ws", 0)) == space.end());
  CHECK_THROWS_WITH(op.validate_config(big, with_key(ws, "ws", 0)), Catch::Contains("unless ws=1"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(c, "ws", 1)), Catch::Contains("producer must be 1"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(ws, "split", 2)), Catch::Contains("ws takes no split"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(ws, "ws", 2)), Catch::Contains("ws must be 0 or 1"));
  CHECK(op.launch_geometry(big, ws).block[0] == 384);
  const auto ws_src = codegen::generate_source(big, ws);
  CHECK(ws_src.text.find("kWs = true;") != std::string::npos);
  CHECK(ws_src.text.find("#define QJIT_WQ_BOUNDS __launch_bounds__(kThreads, 1)") != std::string::npos);
  // Two blocks per SM (stream=2): each splits its pool (384 threads × 80 at entry), 96 per consumer thread.
  const auto ws2 = with_key(with_key(with_key(ws, "stream", 2), "rows", 64), "tma_x", 1);
  CHECK(std::find(space.begin(), space.end(), ws2) != space.end());
  CHECK(codegen::generate_source(big, ws2).text.find("#define QJIT_WQ_BOUNDS __launch_bounds__(kThreads, 2)") !=
        std::string::npos);
  CHECK_THROWS_WITH(op.validate_config(big, with_key(ws2, "rows", 128)), Catch::Contains("rows <= 64"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(ws2, "stream", 3)), Catch::Contains("stream=3"));
  const auto ws2_ptx = codegen::compile(codegen::generate_source(big, ws2), "sm_90");
  CHECK(ws2_ptx.ok);
  CHECK(ws2_ptx.registers <= 80);  // at entry: 65536 / (2 × 384), rounded down
  CHECK(ws2_ptx.ptx.find("setmaxnreg.inc.sync.aligned.u32 96") != std::string::npos);
  CHECK(ws2_ptx.ptx.find("setmaxnreg.dec.sync.aligned.u32 40") != std::string::npos);
  CHECK(ws2_ptx.spill_bytes == 0);
  CHECK(codegen::generate_source(big, producer).text.find("#define QJIT_WQ_BOUNDS __launch_bounds__(kThreads) ") !=
        std::string::npos);
  const auto ws_ptx = codegen::compile(ws_src, "sm_90");
  INFO(ws_ptx.log);
  REQUIRE(ws_ptx.ok);
  CHECK(ws_ptx.ptx.find("setmaxnreg.inc.sync.aligned.u32 224") != std::string::npos);
  CHECK(ws_ptx.ptx.find("setmaxnreg.dec.sync.aligned.u32 56") != std::string::npos);
  CHECK(ws_ptx.log.find("C7508") == std::string::npos);  // ptxas would say so if it ignored setmaxnreg
  CHECK(ws_ptx.ptx.find("cp.async.mbarrier.arrive.noinc") != std::string::npos);
  // The block meets at one barrier, after the mbarriers' init, and none in the mainloop.
  CHECK(count_of(ws_ptx.ptx, "bar.sync") == 1);
  CHECK(ws_ptx.spill_bytes == 0);
  // The stage clocks and block timelines of qjit_ws_probe compile in only when asked for (with
  // the stream schedule, whose pieces the timeline tells apart).
  auto clocked = codegen::generate_source(big, with_key(ws, "stream", 1));
  clocked.text = "#define QJIT_WS_CLOCKS 1\n" + clocked.text;
  const auto clocked_ptx = codegen::compile(clocked, "sm_90");
  INFO(clocked_ptx.log);
  REQUIRE(clocked_ptx.ok);
  for (const char* marks : {"qjit_ws_clocks", "qjit_ws_block", "qjit_ws_pieces"}) {
    CHECK(clocked_ptx.ptx.find(marks) != std::string::npos);
    CHECK(ws_ptx.ptx.find(marks) == std::string::npos);
  }
  // The stream schedule of the open 1024 bucket (whole tiles past its flags' rows) compiles without spills.
  const auto open_ptx = codegen::compile(codegen::generate_source(open_bucket, with_key(ws, "stream", 1)), "sm_90");
  INFO(open_ptx.log);
  REQUIRE(open_ptx.ok);
  CHECK(open_ptx.spill_bytes == 0);
  // tma_x (under ws, x in natural order): x by the bulk tensor copy engine from a tensor map the
  // runtime makes at each launch, the kernel's parameter after the workspace.
  const auto tma = with_key(ws, "tma_x", 1);
  CHECK(std::find(space.begin(), space.end(), tma) != space.end());
  CHECK_THROWS_WITH(op.validate_config(big, with_key(c, "tma_x", 1)), Catch::Contains("ws must be 1"));
  CHECK_THROWS_WITH(op.validate_config(big, without(tma, "a_quad")), Catch::Contains("a_smem or a_quad must be 1"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(tma, "tma_x", 2)), Catch::Contains("tma_x must be 0 or 1"));
  using Map = codegen::LaunchGeometry::TensorMap;
  const auto gt = op.launch_geometry(big, tma);
  REQUIRE(gt.tensor_maps.size() == 1);
  CHECK(gt.tensor_map_param(0) == gt.workspace_param + 1);
  const Map& xm = gt.tensor_maps[0];
  CHECK((xm.source == 0 && xm.rows_param == 7 && xm.rank == 2 && xm.dims[0] == 4096));
  CHECK((xm.box[0] == 64 && xm.box[1] == 256 && xm.element == Map::Element::f16 && xm.swizzle_128));
  CHECK(op.launch_geometry(big, ws).tensor_maps.empty());
  const auto tma_ptx = codegen::compile(codegen::generate_source(big, tma), "sm_90");
  INFO(tma_ptx.log);
  REQUIRE(tma_ptx.ok);
  CHECK(tma_ptx.ptx.find(".param .align 64 .b8 qjit_wq_gemm_param_9[128]") != std::string::npos);
  CHECK(tma_ptx.ptx.find("cp.async.bulk.tensor.2d") != std::string::npos);
  CHECK(tma_ptx.ptx.find("mbarrier.expect_tx") != std::string::npos);
  CHECK(tma_ptx.ptx.find("fence.proxy.async") == std::string::npos);  // x never passes the generic proxy
  CHECK(tma_ptx.spill_bytes == 0);
  CHECK(tma_ptx.ptx.find("cp.async.bulk.tensor.3d") == std::string::npos);
  // tma_w (under ws): the weights by the tensor copy engine too, from a second map after x's:
  // qweight's native words as [n / 16][k / 64][32 · bits], one box per chunk of the block's tiles.
  const auto tma_w = with_key(tma, "tma_w", 1);
  CHECK(std::find(space.begin(), space.end(), tma_w) != space.end());
  CHECK_THROWS_WITH(op.validate_config(big, with_key(c, "tma_w", 1)), Catch::Contains("ws must be 1"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(tma, "tma_w", 2)), Catch::Contains("tma_w must be 0 or 1"));
  const auto gw = op.launch_geometry(big, tma_w);
  REQUIRE(gw.tensor_maps.size() == 4);
  // The most maps a launch passes is the runtime's fixed array (kMaxTensorMaps): past it every
  // launch failed with CUDA_ERROR_INVALID_VALUE after a clean compile (a fifth map, session 33).
  size_t most_maps = 0;
  for (const auto& cfg : space) most_maps = std::max(most_maps, op.launch_geometry(big, cfg).tensor_maps.size());
  CHECK(most_maps == codegen::LaunchGeometry::kMaxTensorMaps);
  CHECK(gw.tensor_map_param(1) == gw.workspace_param + 2);
  const Map& wm = gw.tensor_maps[1];
  CHECK((wm.source == 1 && wm.rows_param < 0 && wm.rank == 3 && wm.element == Map::Element::u32 && !wm.swizzle_128));
  CHECK((wm.dims[0] == 128 && wm.dims[1] == 4096 / 64 && wm.dims[2] == 11008 / 16));
  CHECK((wm.pitches[0] == 512 && wm.pitches[1] == 4096 / 64 * 512));
  CHECK((wm.box[0] == 128 && wm.box[1] == 1 && wm.box[2] == 8));
  // ... and the scales and zero bytes from a third and a fourth, as [k / g][n], a box the block's
  // 128 rows of n × the chunk's one group (g = 128), the ring's S and Z.
  const Map& sm = gw.tensor_maps[2];
  const Map& zm = gw.tensor_maps[3];
  CHECK((sm.source == 2 && sm.rank == 2 && sm.element == Map::Element::f16 && sm.rows_param < 0));
  CHECK((sm.dims[0] == 11008 && sm.dims[1] == 4096 / 128 && sm.pitches[0] == 2 * 11008));
  CHECK((sm.box[0] == 128 && sm.box[1] == 1 && !sm.swizzle_128));
  CHECK((zm.source == 3 && zm.rank == 2 && zm.element == Map::Element::u8));
  CHECK((zm.dims[0] == 11008 && zm.dims[1] == 4096 / 128 && zm.pitches[0] == 11008));
  CHECK((zm.box[0] == 128 && zm.box[1] == 1));
  const auto tma_w_ptx = codegen::compile(codegen::generate_source(big, tma_w), "sm_90");
  INFO(tma_w_ptx.log);
  REQUIRE(tma_w_ptx.ok);
  CHECK(tma_w_ptx.ptx.find(".param .align 64 .b8 qjit_wq_gemm_param_12[128]") != std::string::npos);
  CHECK(tma_w_ptx.ptx.find("cp.async.bulk.tensor.3d") != std::string::npos);
  CHECK(tma_w_ptx.ptx.find("cp.async.cg.shared.global") == std::string::npos);  // no 16-byte copies left
  // The consumers read a slot's words with ordinary loads: a proxy fence comes before the boxes refill it.
  CHECK(tma_w_ptx.ptx.find("fence.proxy.async.shared::cta") != std::string::npos);
  CHECK(tma_w_ptx.spill_bytes == 0);
  // A stage of two chunks whose group spans both (g >= 128, A in natural order) takes one box of
  // scales and one of zeros, not two: per place the producer copies a stage's weights (the first
  // stages, then the rest), 2 boxes of x + 2 of scales and zeros, against 2 + 4 with g = 64.
  const auto two_chunks = with_key(with_key(tma_w, "chunks", 2), "rows", 64);
  const auto two_chunk_boxes = [&](const char* shape) {
    const auto ptx = codegen::compile(codegen::generate_source(parse_spec("wq_gemm", shape), two_chunks), "sm_90");
    INFO(ptx.log);
    REQUIRE(ptx.ok);
    return count_of(ptx.ptx, "cp.async.bulk.tensor.2d");
  };
  REQUIRE_NOTHROW(op.validate_config(parse_spec("wq_gemm", "k=4096,n=11008,m=64"), two_chunks));
  CHECK(two_chunk_boxes("k=4096,n=11008,m=64") == 2 * (2 + 2));
  CHECK(two_chunk_boxes("k=4096,n=11008,m=64,g=64") == 2 * (2 + 4));
  // A stage's wgmma descriptors are its slot's, plus each step's constant offset: the shared address
  // is masked into a descriptor once per stage (0x3fff0 = 262128, the address bits it keeps), not
  // once per wgmma (8 a stage here). That chain of uniform instructions before every wgmma was 80 of
  // the ~600 instructions of the 64-row consumers' loop of two stages.
  {
    const auto m64 = codegen::compile(
        codegen::generate_source(parse_spec("wq_gemm", "k=4096,n=11008,m=64"), with_key(two_chunks, "stream", 1)),
        "sm_90");
    INFO(m64.log);
    REQUIRE(m64.ok);
    CHECK(count_of(m64.ptx, "wgmma.mma_async") == 3 * 8);  // three places multiply a stage
    CHECK(count_of(m64.ptx, "262128") <= 3);
    CHECK(m64.spill_bytes == 0);
  }
  // Symmetric weights have no zeros and so no fourth map; g = 32 puts two groups in a box, bf16
  // scales make it a map of bf16, and float zeros are offsets of the scales' type.
  const auto sym = parse_spec("wq_gemm", "k=4096,n=11008,m=256,zero=sym");
  CHECK(op.launch_geometry(sym, tma_w).tensor_maps.size() == 3);
  const auto g32 =
      op.launch_geometry(parse_spec("wq_gemm", "k=4096,n=11008,m=256,g=32,scales=bf16,x=bf16,zero=float"), tma_w);
  REQUIRE(g32.tensor_maps.size() == 4);
  CHECK((g32.tensor_maps[2].box[1] == 2 && g32.tensor_maps[2].dims[1] == 4096 / 32));
  CHECK((g32.tensor_maps[2].element == Map::Element::bf16 && g32.tensor_maps[3].element == Map::Element::bf16));
  CHECK(g32.tensor_maps[3].pitches[0] == 2 * 11008);
  // Its copies land on 128-byte boundaries: a chunk of 8-bit weights with integer zeros in one
  // warpgroup (4 tiles × 64 + 8 + 4 = 268 pieces of 16 bytes) is padded to 272 in each of 4 stages.
  const auto spec8 = parse_spec("wq_gemm", "k=768,n=112,m=1024,bits=8,zero=int");
  const nlohmann::json one_group = {{"family", "wgmma"}, {"groups", 1},   {"rows", 256},  {"stages", 4},
                                    {"chunks", 1},        {"producer", 1}, {"a_smem", 1},  {"ws", 1},
                                    {"tma_x", 1},         {"tma_w", 1}};
  REQUIRE_NOTHROW(op.validate_config(spec8, one_group));
  CHECK(op.launch_geometry(spec8, one_group).dynamic_smem ==
        op.launch_geometry(spec8, without(one_group, "tma_w")).dynamic_smem + 4 * 4 * 16);
  // stage_y: y through 64 rows × 64·groups of n of shared memory, stored in whole rows 16 bytes at a
  // time (so y must be 16-byte aligned); searched under ws only; no split, no residual.
  const auto staged = with_key(with_key(tma, "stream", 1), "stage_y", 1);
  CHECK(std::find(space.begin(), space.end(), staged) != space.end());
  CHECK(std::find(space.begin(), space.end(), with_key(c, "stage_y", 1)) == space.end());
  CHECK_NOTHROW(op.validate_config(big, with_key(c, "stage_y", 1)));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(split, "stage_y", 1)), Catch::Contains("split must be 1"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(c, "stage_y", 2)), Catch::Contains("stage_y must be 0 or 1"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("wq_gemm", "k=4096,n=11008,m=256,residual=yes"), staged),
                    Catch::Contains("residual=yes"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(ws2, "stage_y", 1)), Catch::Contains("96 registers"));
  CHECK(op.launch_geometry(big, staged).dynamic_smem ==
        op.launch_geometry(big, with_key(tma, "stream", 1)).dynamic_smem + 64 * 128 * 2);
  for (const auto& arg : op.pointer_args(big, staged))
    if (arg.name == "y") CHECK(arg.align == 16);
  for (const auto& arg : op.pointer_args(big, tma))
    if (arg.name == "y") CHECK(arg.align == 2);
  const auto staged_src = codegen::generate_source(big, staged);
  CHECK(staged_src.text.find("kStageY = true;") != std::string::npos);
  const auto staged_ptx = codegen::compile(staged_src, "sm_90");
  INFO(staged_ptx.log);
  REQUIRE(staged_ptx.ok);
  CHECK(staged_ptx.ptx.find("movmatrix.sync.aligned.m8n8.trans.b16") != std::string::npos);
  CHECK(staged_ptx.ptx.find("st.global.v4") != std::string::npos);  // y's rows, 16 bytes per store
  CHECK(tma_ptx.ptx.find("st.global.v4") == std::string::npos);     // (without: 2 bytes per store)
  CHECK(staged_ptx.spill_bytes == 0);
  // Under the stream schedule the producer copies a completing block's parts into the ring by bulk
  // copies (no tensor map) once the flag says they are stored, each after proxy fences: the parts
  // were stored through the generic proxy, and the consumers read a slot's last part with ordinary
  // loads (without the shared-memory fence a copy landed first: BENCHMARKS.md, session 20).
  CHECK(staged_ptx.ptx.find("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") != std::string::npos);
  CHECK(staged_ptx.ptx.find("fence.proxy.async.global") != std::string::npos);
  CHECK(staged_ptx.ptx.find("fence.proxy.async.shared::cta") != std::string::npos);
  const auto split_src = codegen::generate_source(big, split);
  CHECK(split_src.text.find("kSplit = 3;") != std::string::npos);
  CHECK(split_src.text.find("#define QJIT_WQ_CLUSTER __cluster_dims__(1, 1, kSplit)") != std::string::npos);
  CHECK(codegen::generate_source(big, c).text.find("__cluster_dims__") == std::string::npos);  // no split, no cluster
  CHECK_THROWS_WITH(op.validate_config(parse_spec("wq_gemm", "k=4096,n=11008,m=64"), c),
                    Catch::Contains("rows=128 is more than the bucket m=64"));
  // Compiled for sm_90a (wgmma in the PTX); refused for any other target.
  const auto src = codegen::generate_source(big, c);
  CHECK(src.needs_sm90a);
  const auto r = codegen::compile(src, "sm_90");
  INFO(r.log);
  REQUIRE(r.ok);
  CHECK(r.ptx.find(".target sm_90a") != std::string::npos);
  CHECK(r.ptx.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16") != std::string::npos);
  CHECK(r.ptx.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16") != std::string::npos);  // a_quad: A in natural order
  CHECK(r.ptx.find("shfl.sync.bfly") == std::string::npos);                 // with no exchange between lanes
  CHECK(r.ptx.find("cp.async.ca.shared.global") == std::string::npos);      // and no 4-byte copies of x
  CHECK(r.spill_bytes == 0);
  CHECK_THROWS_WITH(codegen::compile(src, "sm_80"), Catch::Contains("compute capability 9.0 only, not sm_80"));
  CHECK_FALSE(codegen::generate_source(big, op.default_config(big)).needs_sm90a);
}

TEST_CASE("wq_gemm: candidates compile for sm_90 without spills", "[wq_gemm][nvrtc]") {
  const auto& op = codegen::find_op("wq_gemm");
  // The full space of the main shape at M = 1 and every other config at
  // M = 16 (both hold every key); then every bit width, zero mode and type
  // through each spec's default and a spread of its space.
  std::vector<test::CompileJob> jobs;
  // (Not the spread configs: spread changes the launch, not the kernel; the
  // spread test checks that their sources match.)
  for (const auto& [s, stride] : {std::pair{"k=4096,n=11008,m=1", 1}, std::pair{"k=4096,n=11008,m=16", 2}}) {
    auto space = op.tunable_space(codegen::parse_spec("wq_gemm", s));
    std::erase_if(space, [](const nlohmann::json& c) { return c.value("spread", 0) == 1; });
    for (size_t i = 0; i < space.size(); i += stride) jobs.push_back({codegen::parse_spec("wq_gemm", s), space[i]});
  }
  // The large-M buckets: a spread of both families.
  for (const char* s : {"k=4096,n=11008,m=64", "k=11008,n=4096,m=256"}) {
    const auto spec = codegen::parse_spec("wq_gemm", s);
    const auto space = op.tunable_space(spec);
    for (size_t i = 0; i < space.size(); i += 6) jobs.push_back({spec, space[i]});
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
    int i = 0;
    for (const auto& c : op.tunable_space(spec))
      if (c.value("family", "") == "wgmma" && i++ % stride == 0) jobs.push_back({spec, c});
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
