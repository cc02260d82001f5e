// wq_gemm's small-M mainloop (the mma family) on the CPU: each tuning key's
// place in the space, its errors, and what it compiles to (NVRTC).
#include <catch2/catch.hpp>
#include <algorithm>
#include <map>
#include "codegen/nvrtc.h"
#include "codegen/ops/wq_gemm.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "runtime/kernel_cache.h"
#include "tests/helpers.h"
#include "tests/wq_gemm_configs.h"

using namespace qjit;
using test::count_in_space;
using test::kPlainSmallM;
using test::kRingSmallM;
using test::with_key;

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
  const auto g = test::geometry_of(op, small, balanced);
  CHECK(g.grid_per_sm == 3);
  CHECK(g.block[0] == 128);
  CHECK(test::is_workspace(test::main_kernel(op, small, balanced), 8));
  CHECK(op.plan(small, balanced).workspace_fixed == 1536);
  CHECK(g.workspace_per_block == 2 * 8 * 32 * 4);
  // The parameter is there in every mma kernel (null without balance).
  const auto plain_geometry = test::geometry_of(op, small, kPlainSmallM);
  CHECK(test::is_workspace(test::main_kernel(op, small, kPlainSmallM), 8));
  CHECK(op.plan(small, kPlainSmallM).workspace_fixed + plain_geometry.workspace_per_block == 0);
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
  CHECK(test::geometry_of(op, small, paired).dynamic_smem == 4 * 2 * (2 * (2 * 4 * 128 + 128) + 2 * 16 * 3));
  CHECK(test::geometry_of(op, small, with_key(kRingSmallM, "stages", 2)).dynamic_smem == 4 * 2 * (2 * 4 * 128 + 128 + 2 * 16 * 3));
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
  CHECK(test::geometry_of(op, m4, ring).dynamic_smem == 8 * 4 * slot);
  CHECK(8 * 4 * slot > 48 * 1024);
  CHECK(test::geometry_of(op, m4, kPlainSmallM).dynamic_smem == 0);  // the register pipeline has no ring
  // The quantized FFN's kernels share the mainloop and its geometry.
  const auto ffn = codegen::parse_spec("fused_ffn", "d=4096,h=11008,weights=native,m=4");
  const auto& ffn_op = codegen::find_op("fused_ffn");
  for (const auto& c : ffn_op.tunable_space(ffn)) {
    INFO(c.dump());
    const unsigned stages = c.value("stages", 0u);
    CHECK((test::geometry_of(ffn_op, ffn, c).dynamic_smem > 0) == (stages > 0));
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
  CHECK(test::geometry_of(op, m8, ring).dynamic_smem == 8 * 4 * (weights_scales_zeros + 8 * 64 * 2));
  CHECK(test::geometry_of(op, m8, regs).dynamic_smem == 8 * 4 * weights_scales_zeros);
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
  CHECK(test::geometry_of(op, m8, regs_pair).dynamic_smem == 8 * 2 * (2 * 2 * 4 * 32 * 4 + 2 * 16 * (2 + 1)));
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
  CHECK(test::geometry_of(op, m16, spread).spread);
  CHECK_FALSE(test::geometry_of(op, m16, ring).spread);
  CHECK(test::geometry_of(op, m16, spread).dynamic_smem == test::geometry_of(op, m16, ring).dynamic_smem);
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
