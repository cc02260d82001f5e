// fused_ffn on group-quantized weights: y[m][n] = Act(Σ_k x[m][k]·w1[k][n]) ·
// Σ_k x[m][k]·w3[k][n] for m < kBucketM (1..8), W1 and W3 in qjit's native
// layout (tuner/reference/wq_gemm.h), dequantised in registers: one kernel
// reads 4 (or 2, 3, 8) bits per weight, computes both GEMVs and the SwiGLU.
//
// The mainloop is wq_gemm's (wq_mma_mainloop.cuh) with kMatrices = 2: a row
// group's tile slots alternate W1 and W3 for the same 16 rows of n (slot 2p is
// W1's tile, slot 2p + 1 W3's), so both products of an output element end in
// the same lane and the epilogue needs no exchange. x (kK = d) is shared by
// both, and one pass over the rows of x covers all of them (kMTiles = 1).
#include "qjit/wq_gemm/wq_mma_mainloop.cuh"

static_assert(kMatrices == 2, "fused_ffn multiplies W1 and W3");
static_assert(kMTiles == 1 && kBucketM <= 8, "fused_ffn takes M = 1..8 rows of x in one pass");

extern "C" __global__ void __launch_bounds__(kThreads)
qjit_fused_ffn(const TX* __restrict__ x, const unsigned* __restrict__ q1, const TS* __restrict__ s1,
               const void* __restrict__ z1, const unsigned* __restrict__ q3, const TS* __restrict__ s3,
               const void* __restrict__ z3, TX* __restrict__ y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane / 4, t = lane % 4;
  const int row_group = warp / kSplitK, part = warp % kSplitK;
  const int first_tile = (blockIdx.x * kGroupsPerBlock + row_group) * kTilesPerMatrix;
  int tile[kTiles];
  row_group_tiles(first_tile, tile);
  const Operands op{x, {q1, q3}, {s1, s3}, {z1, z3}};
  allow_next_grid();

  float acc[kTiles][1][4];
  wq_accumulate(op, tile, part, 0, kBucketM, lane, warp, acc);
  if (part != 0) return;
  // Accumulator e of lane (gq, t): row gq + 8(e/2) of the tile = column n of
  // y, column 2t + e%2 of B = row m of x.
#pragma unroll
  for (int p = 0; p < kTilesPerMatrix; ++p) {
    if (first_tile + p >= kNTiles) continue;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = (first_tile + p) * 16 + gq + 8 * (e / 2), m = 2 * t + e % 2;
      if (m < kBucketM)
        y[static_cast<long long>(m) * kN + n] = qjit::from_f32<TX>(Act::apply(acc[2 * p][0][e]) * acc[2 * p + 1][0][e]);
    }
  }
}
