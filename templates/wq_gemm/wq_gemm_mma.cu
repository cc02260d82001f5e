// wq_gemm on the tensor cores: Y[m][n] = clamp(Σ_k x[m][k]·w[k][n] + bias[n])
// (+ residual[m][n]), w dequantised in registers from qjit's native layout.
// The mainloop (layout, dequantisation, pipelines, split-k) is in
// wq_mma_mainloop.cuh; this file maps the grid and writes y.
//
// Grid: blockIdx.x covers kWarps / kSplitK row groups of kTiles 16-row tiles
// of n; blockIdx.y passes over 8·kMTiles rows of x at a time (looping when M
// exceeds the grid, the m = 1024 bucket; every other bucket makes one pass).
// With kBalance the grid is persistent and every block takes an equal run of
// row groups' chunks (wq_balanced.cuh); workspace is the runtime's scratch
// for its split row groups (null otherwise).
#include "qjit/wq_gemm/wq_balanced.cuh"
#include "qjit/wq_gemm/wq_gemm_epilogue.cuh"

static_assert(kMatrices == 1, "wq_gemm multiplies one matrix");

// A row group's sums (tiles first_tile.., rows m0.. of x) into y.
// Accumulator e of lane (gq, t): row gq + 8(e/2) of the tile = column n of y,
// column 2t + e%2 of B = row m of y.
__device__ __forceinline__ void store_row_group(const float (&acc)[kTiles][kMTiles][4], int first_tile, int m0, int M,
                                                int lane, const TX* __restrict__ bias, const TX* residual, TX* y) {
  const int gq = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    if (first_tile + i >= kNTiles) continue;
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = (first_tile + i) * 16 + gq + 8 * (e / 2), m = m0 + 8 * j + 2 * t + e % 2;
        if (m < M) store_y(acc[i][j][e], bias, residual, y, m, n);
      }
  }
}

// residual may be y itself (y += X·Wᵀ): each element is read and then written
// by the same thread, so neither pointer is __restrict__.
extern "C" __global__ void QJIT_WQ_BOUNDS  // wq_mainloop.cpp: with kBalance blocks per SM
qjit_wq_gemm(const TX* __restrict__ x, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
             const void* __restrict__ zeros, const TX* __restrict__ bias, const TX* residual, TX* y, int M,
             void* workspace) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if constexpr (kBalance > 0) {
    allow_next_grid();
    QJIT_MARK(0);
    const Operands op{x, {qweight}, {scales}, {zeros}};
    const int part = warp % kSplitK;
    auto emit = [&](int g, const float (&acc)[kTiles][kMTiles][4]) {
      store_row_group(acc, g * kTiles, 0, M, lane, bias, residual, y);
    };
    wq_balanced(op, M, lane, warp, part, workspace, emit);
    QJIT_MARK(3);
    return;
  }
  const int row_group = warp / kSplitK, part = warp % kSplitK;
  const int first_tile = (blockIdx.x * kGroupsPerBlock + row_group) * kTiles;
  int tile[kTiles];
  row_group_tiles(first_tile, tile);
  const Operands op{x, {qweight}, {scales}, {zeros}};
  allow_next_grid();
  QJIT_MARK(0);

  for (int m0 = blockIdx.y * kMBlock; m0 < M; m0 += gridDim.y * kMBlock) {
    float acc[kTiles][kMTiles][4];
    wq_accumulate(op, tile, part, m0, M, lane, warp, acc);
    if (part == 0) store_row_group(acc, first_tile, m0, M, lane, bias, residual, y);
    // Below the 1024 bucket M <= kBucketM and the grid covers every row in
    // one pass: leaving the loop frees its registers (8 at m = 1).
    if constexpr (kBucketM < 1024) break;
  }
  QJIT_MARK(3);
}
