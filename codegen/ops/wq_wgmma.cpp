#include "codegen/ops/wq_wgmma.h"
#include <algorithm>
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/ops/wq_tiled.h"

namespace qjit::codegen {
namespace {

bool one_of(int v, std::initializer_list<int> set) { return std::find(set.begin(), set.end(), v) != set.end(); }

}  // namespace

bool WqWgmmaConfig::is_wgmma(const nlohmann::json& j) { return config_family(j) == "wgmma"; }

WqWgmmaConfig WqWgmmaConfig::from(const nlohmann::json& j) {
  auto get = [&](const char* k) { return config_int(j, k, "wq_gemm wgmma config"); };
  // Keys added after the family existed are optional and written only when
  // they differ from their default, so cached configs keep their meaning.
  auto optional = [&](const char* k, int fallback) { return j.is_object() && j.contains(k) ? get(k) : fallback; };
  const size_t optional_keys =
      j.is_object()
          ? j.count("split") + j.count("producer") + j.count("a_smem") + j.count("stream") + j.count("a_quad") +
                j.count("ws") + j.count("tma_x") + j.count("stage_y") + j.count("tma_w")
          : 0;
  if (!is_wgmma(j) || j.size() != 5u + optional_keys)
    throw Error("config",
                "wq_gemm wgmma config needs family, groups, rows, stages, chunks and optionally split, producer, "
                "a_smem, stream, a_quad, ws, tma_x, stage_y and tma_w: " +
                    j.dump());
  return {get("groups"),           get("rows"),          get("stages"),
          get("chunks"),           optional("split", 1), optional("producer", 0),
          optional("a_smem", 0),   optional("stream", 0), optional("a_quad", 0),
          optional("ws", 0),       optional("tma_x", 0),  optional("stage_y", 0),
          optional("tma_w", 0)};
}

nlohmann::json WqWgmmaConfig::to_json() const {
  nlohmann::json j = {{"family", "wgmma"}, {"groups", groups}, {"rows", rows}, {"stages", stages}, {"chunks", chunks}};
  if (split != 1) j["split"] = split;
  if (producer != 0) j["producer"] = producer;
  if (a_smem != 0) j["a_smem"] = a_smem;
  if (stream != 0) j["stream"] = stream;
  if (a_quad != 0) j["a_quad"] = a_quad;
  if (ws != 0) j["ws"] = ws;
  if (tma_x != 0) j["tma_x"] = tma_x;
  if (stage_y != 0) j["stage_y"] = stage_y;
  if (tma_w != 0) j["tma_w"] = tma_w;
  return j;
}

int64_t wq_wgmma_smem_bytes(const WqShape& s, const WqWgmmaConfig& c) {
  // The ring without x (with tma_w each chunk padded to 128 bytes), then up
  // to 1024 bytes of alignment, a slot of x in wgmma's layout per stage (rows
  // × 128 bytes per chunk) and, with a_smem, two stages of dequantised
  // weights per warpgroup (64 rows × 128 bytes per chunk), then with stage_y
  // 64 rows of y at a time (64 rows of x × 64·groups of n, 16-bit). A split
  // adds its sums through the ring: rows / 2 floats per thread.
  const int64_t ring_stage = wq_stage_bytes(s, 4 * c.groups, 0, c.chunks, c.tma_w ? 8 : 1);
  const int64_t ring = c.stages * (ring_stage + int64_t{c.chunks} * c.rows * 128) +
                       int64_t{c.a_smem} * c.groups * 2 * c.chunks * 64 * 128 + int64_t{c.stage_y} * 64 * 128 * c.groups +
                       1024;
  const int64_t sums = c.split > 1 ? int64_t{128} * c.groups * (c.rows / 2) * 4 : 0;
  return std::max(ring, sums);
}

std::string wq_wgmma_problem(const WqShape& s, const WqWgmmaConfig& c, const DeviceLimits& d) {
  if (s.x != s.scales) return "the wgmma family copies x unconverted: x must have the scales' type (fp16 or bf16)";
  if (s.matrices != 1) return "the wgmma family multiplies one matrix";
  if (!one_of(c.groups, {1, 2})) return "groups must be 1 or 2";
  if (!one_of(c.rows, {64, 128, 256})) return "rows must be 64, 128 or 256";
  if (!one_of(c.stages, {3, 4, 5, 6})) return "stages must be 3 to 6";
  if (!one_of(c.chunks, {1, 2})) return "chunks must be 1 or 2";
  if (!one_of(c.split, {1, 2, 3, 4})) return "split must be 1, 2, 3 or 4";
  if (s.k / 64 < int64_t{c.chunks} * c.split) return "split × chunks exceeds the number of 64-wide chunks of k";
  if (!one_of(c.producer, {0, 1})) return "producer must be 0 or 1";
  if (!one_of(c.a_smem, {0, 1})) return "a_smem must be 0 or 1";
  if (!one_of(c.stream, {0, 1, 2, 3})) return "stream must be 0 (a block per output tile) or 1 to 3 blocks per SM";
  if (c.stream > 0 && c.split != 1) return "stream balances k itself (split must be 1)";
  if (!one_of(c.a_quad, {0, 1})) return "a_quad must be 0 or 1";
  if (c.a_quad && c.a_smem) return "a_quad orders A in registers (a_smem must be 0)";
  if (c.a_quad && s.bits != 4) return "a_quad trades 4-bit words (bits must be 4)";
  if (!one_of(c.ws, {0, 1})) return "ws must be 0 or 1";
  if (c.ws && c.producer != 1) return "ws specialises the producer warpgroup (producer must be 1)";
  if (c.ws && c.split != 1) return "ws takes no split (the split's sums reuse the ring; stream balances k instead)";
  // Under ws the blocks per SM share the SM's registers (setmaxnreg splits each block's share).
  if (c.ws && c.stream == 3) return "ws with stream=3: three blocks per SM leave the consumers 64 registers";
  if (c.ws && c.stream == 2 && (c.chunks != 1 || c.rows > 128 / c.groups))
    return "ws with stream=2 leaves the consumers " + std::to_string(c.groups == 2 ? 96 : 216) +
           " registers: chunks=1 and rows <= " + std::to_string(128 / c.groups);
  if (!one_of(c.tma_x, {0, 1})) return "tma_x must be 0 or 1";
  if (c.tma_x && !c.ws) return "tma_x is the warp-specialised producer's copy (ws must be 1)";
  if (c.tma_x && !c.a_smem && !c.a_quad) return "tma_x copies x in natural k order (a_smem or a_quad must be 1)";
  if (!one_of(c.stage_y, {0, 1})) return "stage_y must be 0 or 1";
  if (c.stage_y && c.split != 1) return "stage_y stores whole tiles (a split's blocks store parts: split must be 1)";
  if (c.stage_y && c.ws && c.stream == 2 && c.groups == 2)
    return "stage_y with ws, stream=2 and groups=2 (96 registers per consumer thread: ptxas spills)";
  if (c.stage_y && s.residual)
    return "stage_y rounds y before the residual could be added (residual=yes stores y element by element)";
  if (!one_of(c.tma_w, {0, 1})) return "tma_w must be 0 or 1";
  if (c.tma_w && !c.ws) return "tma_w is the warp-specialised producer's copy (ws must be 1)";
  // Register limits (ptxas spills past them): a third warpgroup leaves 168
  // registers per thread, short of 128 accumulators and tight for two chunks
  // per stage; A in registers takes 16 more per chunk of a stage, twice (the
  // stage multiplied and the next).
  // Under ws the producer keeps 56 registers and two consumer warpgroups get 224 each (setmaxnreg).
  if (c.producer == 1 && c.groups == 2 && !c.ws && (c.rows == 256 || c.chunks == 2))
    return "producer=1 with groups=2 takes rows <= 128 and chunks=1 (168 registers per thread: ptxas spills), "
           "unless ws=1";
  if (c.a_smem == 0 && c.rows == 256 && c.groups == 1)
    return "rows=256 with A in registers needs groups=2 (one warpgroup spills)";
  if (c.a_smem == 0 && c.rows == 256 && c.chunks == 2)
    return "rows=256 with A in registers takes chunks=1 (128 accumulators and 64 A registers spill)";
  if (c.rows > s.m) return "rows=" + std::to_string(c.rows) + " is more than the bucket m=" + std::to_string(s.m);
  if (64 * c.groups > s.n) return "a block covers more than n";
  const int64_t smem = wq_wgmma_smem_bytes(s, c);
  if (smem > d.smem_per_block())
    return "needs " + std::to_string(smem / 1024) + " KB of shared memory (limit " + std::to_string(d.smem_per_block() / 1024) + ")";
  return "";
}

int64_t wq_stream_rows(int64_t bucket_m) { return bucket_m < 1024 ? bucket_m : 8192; }

std::vector<WqWgmmaConfig> wq_wgmma_space(const WqShape& s, const DeviceLimits& device) {
  std::vector<WqWgmmaConfig> out;
  for (int groups : {1, 2})
    for (int rows : {64, 128, 256})
      for (int stages : {3, 4})  // 5 and 6 were within noise of 4, with ws too (H100)
        for (int chunks : {1, 2})
          for (int split : {1, 2, 3, 4})
            for (int producer : {0, 1})
              for (int a_smem : {0, 1})
                for (int stream : {0, 1, 2, 3})
                  for (int a_quad : {0, 1})
                    for (int ws : {0, 1})
                      for (int tma_x : {0, 1})
                        for (int stage_y : {0, 1})
                          for (int tma_w : {0, 1}) {
                        const WqWgmmaConfig c{groups, rows,   stages, chunks, split,   producer,
                                              a_smem, stream, a_quad, ws,     tma_x,   stage_y, tma_w};
                        if (!wq_wgmma_problem(s, c, device).empty()) continue;
                        // y through shared memory is searched where the epilogue weighs most: the
                        // warp-specialised kernels of large M (legal, and tested, with the others).
                        if (stage_y && !ws) continue;
                        // Under ws, x by the tensor copy engine beat the 16-byte copies in every pair
                        // tuned (H100: 47.9 against 51.8 us at 4096 x 11008, M = 256;
                        // 24.8 against 25.3 at M = 64); they stay for x in permuted order only.
                        if (ws && !tma_x && (a_quad || a_smem)) continue;
                        // At 4 bits, A in registers is read in natural order (a_quad): the permuted copies
                        // of x lost to it on every shape tuned (H100: 27.4 against 24.4 us at 4096 x 11008,
                        // M = 64; 62.4 against 51.0 at M = 256; 58.4 against 50.6 at 11008 x 4096, M = 256).
                        // Those copies were issued by the warps that multiply. Under ws the
                        // producer issues them; up to 128 rows (x's 4-byte copies: 8 KB a chunk) they are
                        // searched there too, 9-10% slower than a_quad at M = 64 (H200).
                        if (s.bits == 4 && a_smem == 0 && a_quad == 0 && !(ws && rows <= 128)) continue;
                        // Only as many blocks per SM as their shared memory fits (the system's
                        // reserve per block and the runtime's 128 bytes of slack included): more
                        // would not be resident together.
                        const int64_t per_block = wq_wgmma_smem_bytes(s, c) + device.smem_reserved_per_block + 128;
                        if (stream > 1 && per_block * stream > device.smem_per_sm) continue;
                        out.push_back(c);
                      }
  return out;
}

std::vector<Constant> wq_wgmma_constants(const WqShape& s, const WqWgmmaConfig& c) {
  auto out = wq_shape_constants(s);
  out.push_back({"int", "kGroups", std::to_string(c.groups), "tunable: warpgroups across n (64 rows each)"});
  out.push_back({"int", "kRows", std::to_string(c.rows), "tunable: rows of x per block (wgmma n)"});
  out.push_back({"int", "kStages", std::to_string(c.stages), "tunable: cp.async ring depth"});
  out.push_back({"int", "kChunksPerStage", std::to_string(c.chunks), "tunable: chunks of 64 k per ring stage"});
  out.push_back({"int", "kSplit", std::to_string(c.split), "tunable: blocks of a cluster splitting k"});
  out.push_back({"int", "kProducer", std::to_string(c.producer), "tunable: 1 = a warpgroup that only copies"});
  out.push_back({"bool", "kASmem", c.a_smem ? "true" : "false", "tunable: dequantised weights through shared memory"});
  out.push_back({"bool", "kAQuad", c.a_quad ? "true" : "false",
                 "tunable: A in registers put in natural k order within each quad (x copied in natural order)"});
  out.push_back({"int", "kStream", std::to_string(c.stream),
                 "tunable: 0 a block per output tile, else blocks per SM of the stream schedule"});
  out.push_back({"int", "kStreamRows", std::to_string(wq_stream_rows(s.m)),
                 "rows of x the stream schedule balances (past them: whole tiles round robin)"});
  out.push_back({"bool", "kWs", c.ws ? "true" : "false",
                 "tunable: warp-specialised (mbarriers per ring slot, the producer's registers to the consumers)"});
  out.push_back({"bool", "kTmaX", c.tma_x ? "true" : "false",
                 "tunable: x copied by the bulk tensor copy engine (a tensor map parameter)"});
  out.push_back({"bool", "kStageY", c.stage_y ? "true" : "false",
                 "tunable: y through shared memory, stored in whole rows of the tile"});
  out.push_back({"bool", "kTmaW", c.tma_w ? "true" : "false",
                 "tunable: the weights, scales and zeros copied by the bulk tensor copy engine (tensor map parameters)"});
  const bool zero_map = c.tma_w && s.zero != "sym";
  const auto param = [](const char* name) { return std::string(", const __grid_constant__ TensorMapParam ") + name; };
  out.push_back({"macro", "QJIT_WQ_TMA_PARAM",
                 (c.tma_x ? param("x_map") : "") + (c.tma_w ? param("w_map") + param("s_map") : "") +
                     (zero_map ? param("z_map") : ""),
                 "the tensor maps of x (kTmaX) and of the weights, scales and zeros (kTmaW), the last parameters"});
  out.push_back({"macro", "QJIT_WQ_TMA_ARG", c.tma_x ? "&x_map" : "nullptr", "the tensor map of x, if any"});
  out.push_back({"macro", "QJIT_WQ_TMA_W_ARGS",
                 !c.tma_w   ? "nullptr, nullptr, nullptr"
                 : zero_map ? "&w_map, &s_map, &z_map"
                            : "&w_map, &s_map, nullptr",
                 "the tensor maps of the weights, scales and zeros, if any"});
  // setmaxnreg needs the register cap set at entry: the blocks per SM in the bounds.
  out.push_back({"macro", "QJIT_WQ_BOUNDS",
                 c.ws ? "__launch_bounds__(kThreads, " + std::to_string(std::max(1, c.stream)) + ")"
                      : "__launch_bounds__(kThreads)",
                 "the kernel's launch bounds"});
  // Only a split launches clusters: configs without one launch exactly as before the key existed.
  out.push_back({"macro", "QJIT_WQ_CLUSTER", c.split > 1 ? "__cluster_dims__(1, 1, kSplit)" : "",
                 "the kernel's cluster: kSplit blocks along z"});
  return out;
}

WqLaunch wq_wgmma_launch(const WqShape& s, const WqWgmmaConfig& c) {
  WqLaunch l;
  LaunchGeometry& g = l.geometry;
  const int64_t n_blocks = (s.n + 64 * c.groups - 1) / (64 * c.groups);
  g.block[0] = static_cast<unsigned>(128 * (c.groups + c.producer));
  g.dynamic_smem = static_cast<unsigned>(wq_wgmma_smem_bytes(s, c));
  g.programmatic = true;
  using Map = TensorMap;
  if (c.tma_x) {
    // x [m][k], boxes of one chunk of 64 k × the block's rows of x,
    // swizzled as wgmma reads them.
    Map x;
    x.source = "x", x.rows_arg = "m", x.rank = 2;
    x.element = s.x == "bf16" ? Map::Element::bf16 : Map::Element::f16;
    x.dims[0] = s.k;
    x.box[0] = 64, x.box[1] = static_cast<unsigned>(c.rows);
    x.swizzle_128 = true;
    l.tensor_maps.push_back(x);
  }
  if (c.tma_w) {
    // qweight in the native layout, as words [n / 16][k / 64][32 · bits]: tile
    // (nt, kc) is 32 · bits words at word (nt · k / 64 + kc) · 32 · bits (tuner/reference/wq_gemm.h).
    // A box is one chunk of the block's 4 · groups tiles, the ring's layout of a chunk's words.
    Map w;
    w.source = "qweight", w.rank = 3, w.element = Map::Element::u32;
    w.dims[0] = 32 * s.bits, w.dims[1] = s.k / 64, w.dims[2] = s.n / 16;
    w.pitches[0] = int64_t{128} * s.bits, w.pitches[1] = s.k / 64 * 128 * s.bits;
    w.box[0] = static_cast<unsigned>(32 * s.bits), w.box[1] = 1, w.box[2] = static_cast<unsigned>(4 * c.groups);
    l.tensor_maps.push_back(w);
    // scales, then zeros if any, as [k / g][n]: a box is the block's
    // 64 · groups rows of n × a chunk's groups (the ring's S and Z, wq_stage_ring.cuh).
    const unsigned chunk_groups = static_cast<unsigned>(s.g < 64 ? 64 / s.g : 1);
    Map sm;
    sm.source = "scales", sm.rank = 2;
    sm.element = s.scales == "bf16" ? Map::Element::bf16 : Map::Element::f16;
    sm.dims[0] = s.n, sm.dims[1] = s.k / s.g, sm.pitches[0] = s.n * 2;
    sm.box[0] = static_cast<unsigned>(64 * c.groups), sm.box[1] = chunk_groups;
    l.tensor_maps.push_back(sm);
    if (s.zero != "sym") {
      // zero bytes (int), or offsets of the scales' type (float)
      Map zm = sm;
      zm.source = "zeros";
      if (s.zero == "int") zm.element = Map::Element::u8, zm.pitches[0] = s.n;
      l.tensor_maps.push_back(zm);
    }
  }
  if (c.stream > 0) {
    // The template's workspace: a flag per output tile, then one piece of
    // sums per block (128 threads per warpgroup × rows / 2 floats).
    const int64_t tiles = n_blocks * ((wq_stream_rows(s.m) + c.rows - 1) / c.rows);
    g.grid_per_sm = static_cast<unsigned>(c.stream);
    l.workspace_fixed = static_cast<size_t>((tiles * 4 + 255) / 256 * 256);
    g.workspace_per_block = size_t{128} * c.groups * (c.rows / 2) * 4;
    return l;
  }
  g.grid[0] = static_cast<unsigned>((s.m + c.rows - 1) / c.rows);
  g.grid[1] = static_cast<unsigned>(n_blocks);
  g.grid[2] = static_cast<unsigned>(c.split);  // one cluster along z (the kernel's __cluster_dims__)
  return l;
}

}  // namespace qjit::codegen
