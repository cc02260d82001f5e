// Host side of wq_gemm's Hopper kernel (templates/wq_gemm/wq_gemm_wgmma.cu,
// "family": "wgmma", compiled for sm_90a): its config, legality, search
// space, constants, grid and tensor maps. How it works and what was tried:
// docs/wq_gemm_wgmma.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/op.h"
#include "codegen/ops/wq_mainloop.h"

namespace qjit::codegen {

// The wgmma family (templates/wq_gemm/wq_gemm_wgmma.cu, sm_90a only): a
// block of `groups` warpgroups owns 64·groups rows of n and `rows` rows of x
// (wgmma's n: 64, 128 or 256); the same cp.async ring of `stages` stages,
// each `chunks` chunks of 64 k. A cluster of `split` blocks splits k and adds
// its sums through distributed shared memory; with `producer` 1, one more
// warpgroup issues every copy; with `a_smem` 1, the dequantised weights reach
// wgmma through shared memory instead of registers, so x is copied in natural
// order; with `stream` b > 0, a persistent grid of b blocks per SM takes
// equal runs of (output tile, stage) units and completes split tiles through
// the runtime's workspace (no split; the open 1024 bucket balances up to
// wq_stream_rows rows of x and takes whole tiles round robin past them); with `a_quad` 1
// (4-bit, A in registers) the lanes of each quad trade weights into natural
// k order, so x is copied in natural order without sA; with `ws` 1 (warp
// specialisation, with the producer) mbarriers per ring slot replace the
// block barrier per stage and the producer gives its registers to the
// warpgroups that multiply; with `tma_x` 1 (under ws) x arrives by the bulk
// tensor copy engine from a tensor map the runtime makes at each launch;
// with `stage_y` 1 (no split, no residual) the warps pass y through shared
// memory and store whole rows of the tile; with `tma_w` 1 (under ws) the
// weights arrive by the tensor copy engine, one box per chunk. These
// nine keys are absent at their defaults (1, 0, 0, 0, 0, 0, 0, 0 and 0), so
// configs cached before them keep their meaning.
struct WqWgmmaConfig {
  int groups, rows, stages, chunks, split = 1, producer = 0;
  int a_smem = 0;  // 1: dequantised weights go through shared memory (x copied 16 bytes at a time)
  int stream = 0;  // > 0: a persistent grid of this many blocks per SM sharing (tile, stage) units evenly
  int a_quad = 0;  // 1 (4-bit, A in registers): A put in natural k order within each quad, x copied 16 bytes at a time
  int ws = 0;      // 1: warp-specialised (producer and consumers joined by mbarriers, setmaxnreg)
  int tma_x = 0;   // 1 (with ws): x copied by cp.async.bulk.tensor, one instruction per chunk
  int stage_y = 0;  // 1: y through shared memory, stored in whole rows of the tile (16 bytes per thread)
  int tma_w = 0;    // 1 (with ws): the weights copied by cp.async.bulk.tensor, one instruction per chunk

  static bool is_wgmma(const nlohmann::json& j);  // "family": "wgmma"
  static WqWgmmaConfig from(const nlohmann::json& j);
  nlohmann::json to_json() const;
};

// Rows of x whose output tiles the stream schedule balances (and the
// workspace holds flags for): the bucket's, or for the open 1024 bucket, which
// serves any M, a cap. Past it the same persistent grid takes whole tiles
// round robin (many tiles a block: little left to balance).
int64_t wq_stream_rows(int64_t bucket_m);

// d: the device's limits (shared memory per block); validate_config passes the defaults (H100, H200).
std::string wq_wgmma_problem(const WqShape& s, const WqWgmmaConfig& c, const DeviceLimits& d = {});
// Empty below m = 64; a persistent grid of several blocks per SM only where
// their shared memory fits the device's SMs.
std::vector<WqWgmmaConfig> wq_wgmma_space(const WqShape& s, const DeviceLimits& device = {});
int64_t wq_wgmma_smem_bytes(const WqShape& s, const WqWgmmaConfig& c);
std::vector<Constant> wq_wgmma_constants(const WqShape& s, const WqWgmmaConfig& c);
// The grid (or persistent grid and its workspace) and the tensor maps of
// x (tma_x) and of the weights, scales and zeros (tma_w).
WqLaunch wq_wgmma_launch(const WqShape& s, const WqWgmmaConfig& c);

}  // namespace qjit::codegen
