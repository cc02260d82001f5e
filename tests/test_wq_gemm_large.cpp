// wq_gemm's large-M families on the CPU (tiled mma.sync and Hopper's wgmma):
// configs, errors, launch geometry, shared memory, and NVRTC compiles.
#include <catch2/catch.hpp>
#include <algorithm>
#include "codegen/nvrtc.h"
#include "codegen/ops/wq_gemm.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "tests/helpers.h"
#include "tests/wq_gemm_configs.h"

using namespace qjit;
using test::count_of;
using test::with_key;

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
  const auto g = test::geometry_of(op, big, c);
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
  const auto g = test::geometry_of(op, big, c);
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
  CHECK(test::geometry_of(op, big, producer).block[0] == 384);
  CHECK(codegen::generate_source(big, producer).text.find("kProducer = 1;") != std::string::npos);
  CHECK_THROWS_WITH(op.validate_config(parse_spec("wq_gemm", "k=256,n=11008,m=256"), bad("split", 3)),
                    Catch::Contains("split × chunks exceeds"));
  // split: a cluster along z; the key is written only when it is not 1, so
  // configs cached before it exist mean what they meant.
  const auto split = bad("split", 3);
  CHECK(std::find(space.begin(), space.end(), split) != space.end());
  CHECK(std::find(space.begin(), space.end(), bad("split", 1)) == space.end());
  const auto gs = test::geometry_of(op, big, split);
  CHECK(gs.grid[2] == 3);
  CHECK(gs.dynamic_smem == g.dynamic_smem);  // the ring (126 KB) outgrows the sums (256 threads × 64 floats)
  const nlohmann::json wide = {{"family", "wgmma"}, {"groups", 2}, {"rows", 256}, {"stages", 3}, {"chunks", 1}, {"split", 2}};
  CHECK(test::geometry_of(op, big, wide).dynamic_smem == 256 * 128 * 4);  // the sums outgrow the ring
  // a_smem: two stages of sA per warpgroup (64 rows × 128 bytes per chunk)
  // on top of the ring; absent when 0. With A out of registers, one
  // warpgroup holds 256 rows of accumulators.
  const auto a_smem = without(bad("a_smem", 1), "a_quad");
  CHECK(std::find(space.begin(), space.end(), a_smem) != space.end());
  CHECK(std::find(space.begin(), space.end(), with_key(a_smem, "a_smem", 0)) == space.end());
  CHECK(test::geometry_of(op, big, a_smem).dynamic_smem == g.dynamic_smem + 2 * 2 * 2 * 64 * 128);
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
  CHECK(op.plan(open_bucket, stream).workspace_fixed == 86 * 64 * 4);  // 64 m-blocks of 128 rows
  CHECK(codegen::generate_source(open_bucket, stream).text.find("kStreamRows = 8192;") != std::string::npos);
  CHECK(codegen::generate_source(big, stream).text.find("kStreamRows = 256;") != std::string::npos);
  const auto gst = test::geometry_of(op, big, stream);
  CHECK(gst.grid_per_sm == 1);
  CHECK(gst.dynamic_smem == g.dynamic_smem);
  CHECK(test::is_workspace(test::main_kernel(op, big, stream), 8));
  CHECK(op.plan(big, stream).workspace_fixed == (86 * 2 * 4 + 255) / 256 * 256);  // 86 n-blocks × 2 m-blocks of 128 rows
  CHECK(gst.workspace_per_block == 256 * 64 * 4);                 // 256 threads × 64 accumulators
  CHECK(op.plan(big, c).workspace_fixed + g.workspace_per_block == 0);  // the grid schedules take none
  // Two or three blocks per SM only where their shared memory fits that many.
  for (const auto& j : space)
    if (j.value("family", "") == "wgmma" && j.value("stream", 0) > 1)
      CHECK((test::geometry_of(op, big, j).dynamic_smem + 1152) * j.at("stream").get<int>() <= 228 * 1024);
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
  CHECK(test::geometry_of(op, big, permuted).dynamic_smem == g.dynamic_smem);
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
  const auto gpw = test::main_kernel(op, big, ws_permuted_w);
  REQUIRE(gpw.tensor_maps.size() == 3);
  CHECK((gpw.tensor_maps[0].source == "qweight" && gpw.tensor_maps[1].source == "scales" &&
         gpw.tensor_maps[2].source == "zeros"));
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
  CHECK(test::geometry_of(op, big, ws).block[0] == 384);
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
  using Map = codegen::TensorMap;
  const auto gt = test::main_kernel(op, big, tma);
  REQUIRE(gt.tensor_maps.size() == 1);
  CHECK((gt.params.size() == 9 && test::is_workspace(gt, 8)));  // the map is parameter 9, after the workspace
  const Map& xm = gt.tensor_maps[0];
  CHECK((xm.source == "x" && xm.rows_arg == "m" && xm.rank == 2 && xm.dims[0] == 4096));
  CHECK((xm.box[0] == 64 && xm.box[1] == 256 && xm.element == Map::Element::f16 && xm.swizzle_128));
  CHECK(test::main_kernel(op, big, ws).tensor_maps.empty());
  const auto tma_ptx = codegen::compile(codegen::generate_source(big, tma), "sm_90");
  INFO(tma_ptx.log);
  REQUIRE(tma_ptx.ok);
  CHECK(tma_ptx.ptx.find(".param .align 64 .b8 qjit_wq_gemm_param_9[128]") != std::string::npos);
  CHECK(tma_ptx.ptx.find("cp.async.bulk.tensor.2d") != std::string::npos);
  // 128 producer threads (no tma_w): thread 0 counts x's bytes with an arrival of its own, one more
  // than the threads' cp.async arrivals, so the phase cannot complete before the bytes are counted.
  CHECK(tma_ptx.ptx.find("mbarrier.arrive.expect_tx") != std::string::npos);
  CHECK(tma_ptx.ptx.find("cp.async.mbarrier.arrive.noinc") != std::string::npos);
  CHECK(tma_ptx.ptx.find("fence.proxy.async") == std::string::npos);  // x never passes the generic proxy
  CHECK(tma_ptx.spill_bytes == 0);
  CHECK(tma_ptx.ptx.find("cp.async.bulk.tensor.3d") == std::string::npos);
  // tma_w (under ws): the weights by the tensor copy engine too, from a second map after x's:
  // qweight's native words as [n / 16][k / 64][32 · bits], one box per chunk of the block's tiles.
  const auto tma_w = with_key(tma, "tma_w", 1);
  CHECK(std::find(space.begin(), space.end(), tma_w) != space.end());
  CHECK_THROWS_WITH(op.validate_config(big, with_key(c, "tma_w", 1)), Catch::Contains("ws must be 1"));
  CHECK_THROWS_WITH(op.validate_config(big, with_key(tma, "tma_w", 2)), Catch::Contains("tma_w must be 0 or 1"));
  const auto gw = test::main_kernel(op, big, tma_w);
  REQUIRE(gw.tensor_maps.size() == 4);
  // The most maps a launch passes is the runtime's fixed array (kMaxTensorMaps): past it every
  // launch failed with CUDA_ERROR_INVALID_VALUE after a clean compile (a fifth map).
  size_t most_maps = 0;
  for (const auto& cfg : space) most_maps = std::max(most_maps, test::main_kernel(op, big, cfg).tensor_maps.size());
  CHECK(most_maps == codegen::KernelDef::kMaxTensorMaps);
  const Map& wm = gw.tensor_maps[1];
  CHECK((wm.source == "qweight" && wm.rows_arg.empty() && wm.rank == 3 && wm.element == Map::Element::u32 && !wm.swizzle_128));
  CHECK((wm.dims[0] == 128 && wm.dims[1] == 4096 / 64 && wm.dims[2] == 11008 / 16));
  CHECK((wm.pitches[0] == 512 && wm.pitches[1] == 4096 / 64 * 512));
  CHECK((wm.box[0] == 128 && wm.box[1] == 1 && wm.box[2] == 8));
  // ... and the scales and zero bytes from a third and a fourth, as [k / g][n], a box the block's
  // 128 rows of n × the chunk's one group (g = 128), the ring's S and Z.
  const Map& sm = gw.tensor_maps[2];
  const Map& zm = gw.tensor_maps[3];
  CHECK((sm.source == "scales" && sm.rank == 2 && sm.element == Map::Element::f16 && sm.rows_arg.empty()));
  CHECK((sm.dims[0] == 11008 && sm.dims[1] == 4096 / 128 && sm.pitches[0] == 2 * 11008));
  CHECK((sm.box[0] == 128 && sm.box[1] == 1 && !sm.swizzle_128));
  CHECK((zm.source == "zeros" && zm.rank == 2 && zm.element == Map::Element::u8));
  CHECK((zm.dims[0] == 11008 && zm.dims[1] == 4096 / 128 && zm.pitches[0] == 11008));
  CHECK((zm.box[0] == 128 && zm.box[1] == 1));
  const auto tma_w_ptx = codegen::compile(codegen::generate_source(big, tma_w), "sm_90");
  INFO(tma_w_ptx.log);
  REQUIRE(tma_w_ptx.ok);
  CHECK(tma_w_ptx.ptx.find(".param .align 64 .b8 qjit_wq_gemm_param_12[128]") != std::string::npos);
  CHECK(tma_w_ptx.ptx.find("cp.async.bulk.tensor.3d") != std::string::npos);
  CHECK(tma_w_ptx.ptx.find("cp.async.cg.shared.global") == std::string::npos);  // no 16-byte copies left
  // One producer thread: its bytes by expect_tx, then its plain arrival in program order (arrive_full).
  CHECK(tma_w_ptx.ptx.find("mbarrier.expect_tx") != std::string::npos);
  CHECK(tma_w_ptx.ptx.find("mbarrier.arrive.expect_tx") == std::string::npos);
  CHECK(tma_w_ptx.ptx.find("cp.async.mbarrier.arrive") == std::string::npos);
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
  CHECK(test::main_kernel(op, sym, tma_w).tensor_maps.size() == 3);
  const auto g32 =
      test::main_kernel(op, parse_spec("wq_gemm", "k=4096,n=11008,m=256,g=32,scales=bf16,x=bf16,zero=float"), tma_w);
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
  CHECK(test::geometry_of(op, spec8, one_group).dynamic_smem ==
        test::geometry_of(op, spec8, without(one_group, "tma_w")).dynamic_smem + 4 * 4 * 16);
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
  CHECK(test::geometry_of(op, big, staged).dynamic_smem ==
        test::geometry_of(op, big, with_key(tma, "stream", 1)).dynamic_smem + 64 * 128 * 2);
  for (const auto& arg : op.plan(big, staged).pointers)
    if (arg.name == "y") CHECK(arg.align == 16);
  for (const auto& arg : op.plan(big, tma).pointers)
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
  // loads (without the shared-memory fence a copy landed first: docs/wq_gemm_wgmma.md).
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
