// Host side of the weight-quantized tensor-core mainloop
// (templates/wq_gemm/wq_mma_mainloop.cuh), shared by wq_gemm (one matrix) and
// fused_ffn on quantized weights (W1 and W3): its tunables, their legality,
// the constants the mainloop reads, and the grid of row groups.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/op.h"

namespace qjit::codegen {

// What the mainloop multiplies: `matrices` matrices W[n][k] quantized with
// `bits` bits in groups of g along k, by `m` rows of x (a bucket: M <= m).
struct WqShape {
  int64_t k = 0, n = 0, m = 1, g = 128;
  int bits = 4;
  std::string zero = "int", scales = "fp16", x = "fp16";
  int matrices = 1;
  bool residual = false;  // y += residual (wq_gemm's epilogue)
};

// A block has `warps` warps: warps/split_k row groups of `tiles` 16-row tile
// slots (tiles / matrices tiles of n, each in every matrix), each group's
// chunks of 64 k shared round-robin by split_k warps and summed through
// shared memory. A block covers 8·mtiles rows of x per pass. Loads run
// `unroll` chunks ahead in registers (stages 0) or through a cp.async ring of
// `stages` slots per warp; with l2ahead > 0 each warp also asks L2 for the
// weights l2ahead chunks beyond its own loads. zero_after = 1 multiplies the
// undequantised magic values and subtracts 1024 + zero from each row's sum.
// balance > 0 (wq_gemm at m <= 16, split_k = warps; legal, not searched)
// launches `balance` blocks per SM, each taking an equal run of (row group,
// chunk) units, and sums row groups split between blocks through a
// runtime-owned workspace (templates/wq_gemm/wq_balanced.cuh).
// min_blocks = 1 (wq_gemm) names one block per SM in the kernel's launch
// bounds, which lets ptxas take up to the block's full share of registers.
// x_regs = 1 (the ring; searched at m = 4 to 16) keeps x out of the ring: each lane
// loads its B fragments of x into registers one chunk ahead, through L1.
// spread = 1 (wq_gemm at m <= 16, searched with the plain ring) lets no SM
// hold more than ceil(blocks / SMs) of the grid's blocks (LaunchGeometry::spread).
// pair = 1 (the ring, 128 | g; searched at m <= 16, with x in the slots, and
// from m = 4 also with x_regs) has a warp take chunks 2j and 2j + 1
// together, sharing one group's scales and zeros; each of the ring's
// `stages` slots then holds such a pair.
struct WqConfig {
  int warps, split_k, tiles, mtiles, unroll;
  int stages = 0;
  // Optional keys, absent when 0 (configs cached before them keep their meaning).
  int l2ahead = 0;
  int zero_after = 0;
  int balance = 0;
  int min_blocks = 0;
  int x_regs = 0;
  int spread = 0;
  int pair = 0;

  // Reads the six keys and the optional ones; `extra_keys` names keys the
  // caller owns (fused_ffn's "family").
  static WqConfig from(const nlohmann::json& j, const std::string& op, size_t extra_keys = 0);
  nlohmann::json to_json() const;
};

// Rows of x a kernel for bucket m covers in one pass, in tiles of 8 (at most 8 tiles).
int wq_mtiles_needed(int64_t m);
// Why the config is illegal for the shape, or "".
std::string wq_config_problem(const WqShape& s, const WqConfig& c);
// Every legal config (static pruning included).
std::vector<WqConfig> wq_tunable_space(const WqShape& s);
// 4 warps splitting k four ways (else two, else one), one tile per matrix,
// the bucket's rows of x, the register pipeline.
WqConfig wq_default_config(const WqShape& s);
// The constants every wq kernel reads: types, shape, quantization.
std::vector<Constant> wq_shape_constants(const WqShape& s);
// The mainloop's constants: the shape's and the tunables.
std::vector<Constant> wq_constants(const WqShape& s, const WqConfig& c);
// A wq kernel's launch: its geometry (with the workspace it needs per
// block), the fixed part of its workspace, and the tensor maps it takes after
// its parameters.
struct WqLaunch {
  LaunchGeometry geometry;
  size_t workspace_fixed = 0;
  std::vector<TensorMap> tensor_maps;
};
// Grid and block: x over row groups of n, y over passes of 8·mtiles rows of x;
// with balance, `balance` blocks per SM and the workspace of the split row
// groups.
WqLaunch wq_launch(const WqShape& s, const WqConfig& c);
// Alignments of one matrix's pointers: qweight, scales, zeros (the cp.async
// ring copies scales and zeros in 16-byte pieces).
struct WqAlign {
  int qweight, scales, zeros;
};
WqAlign wq_alignment(const WqShape& s, const WqConfig& c);
// Bytes of the packed weights, scales and zeros of one matrix.
double wq_weight_bytes(const WqShape& s);

}  // namespace qjit::codegen
