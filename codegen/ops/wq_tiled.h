// Host side of wq_gemm's tiled mma.sync kernel for large M
// (templates/wq_gemm/wq_gemm_tiled.cu, "family": "tiled"): its legality, the
// search space, the constants the template reads and the grid; and the size
// of a stage of the cp.async ring it shares with the wgmma family
// (wq_wgmma.h). The small-M family is in wq_mainloop.h; wq_gemm.cpp tells the
// families apart by the config's "family" key.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/op.h"
#include "codegen/ops/wq_mainloop.h"

namespace qjit::codegen {

// A block has warps_n × warps_m × warps_k warps. Each warp multiplies wn
// tiles of 16 rows of n by wm tiles of 8 rows of x; a block covers
// 16·wn·warps_n rows of n and 8·wm·warps_m rows of x, and its warps_k warps of
// one position split k. x and the weights stream through a cp.async ring of
// `stages` stages in shared memory.
struct WqTiledConfig {
  int warps_n, warps_m, warps_k, wn, wm, stages;

  int warps() const { return warps_n * warps_m * warps_k; }
  int block_rows() const { return 8 * wm * warps_m; }     // rows of x
  int block_tiles() const { return wn * warps_n; }        // 16-row tiles of n
  static bool is_tiled(const nlohmann::json& j);          // "family": "tiled"
  static WqTiledConfig from(const nlohmann::json& j);     // throws Error naming the bad key
  nlohmann::json to_json() const;
};

// Why the config is illegal for the shape, or "".
std::string wq_tiled_problem(const WqShape& s, const WqTiledConfig& c);
// The legal configs worth timing (static pruning included); empty below m = 32.
std::vector<WqTiledConfig> wq_tiled_space(const WqShape& s);
// The default from m = 256 on (none below, or when no small default fits the shape).
std::optional<WqTiledConfig> wq_tiled_default(const WqShape& s);
// Dynamic shared memory: the ring and two stages' dequantised weights, or the
// split-k sums if larger.
int64_t wq_tiled_smem_bytes(const WqShape& s, const WqTiledConfig& c);
std::vector<Constant> wq_tiled_constants(const WqShape& s, const WqTiledConfig& c);
// x over blocks of rows of x (fastest: neighbours share weights), y over blocks of n.
WqLaunch wq_tiled_launch(const WqShape& s, const WqTiledConfig& c);

// Bytes of one ring stage (wq_stage_ring.cuh): per chunk of 64 k, `tiles`
// tiles of weights with their scales and zeros for the chunk's groups, and
// `rows` rows of x at 144 bytes, padded to a multiple of `align` 16-byte
// pieces (the template's kChunkPieces).
int64_t wq_stage_bytes(const WqShape& s, int64_t tiles, int64_t rows, int64_t chunks, int64_t align = 1);

}  // namespace qjit::codegen
