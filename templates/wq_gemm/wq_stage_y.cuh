#pragma once
// y through shared memory (kStageY): the wgmma kernel's epilogue that stores
// whole rows of the output tile. Included by wq_gemm_wgmma.cu once its ring,
// kAcc and store_four are defined; store_tile there calls store_tile_staged.
//
// Stored from the accumulators, a warp's store writes 2 bytes per lane to 4
// rows of y (lane (gq, t): n = gq, m = 2t + e % 2): 4 partial sectors per
// instruction, 4096 requests for a 256-row tile, whose epilogue took ~8000
// cycles (qjit_ws_probe, H100). Here the threads that multiply
// pass y through shared memory, kStageRows rows of x at a time, and store
// whole rows of the tile: a warp's 16-byte stores cover 2 rows of 256 bytes
// (2 warpgroups), 8 times fewer requests.
//
// Writing: for each 8 rows of x (j), lane (gq, t) holds y at n = gq (+8) of
// its warp's tile and m = 8j + 2t, 8j + 2t + 1, an 8 × 8 matrix of n × m in
// mma's fragment layout once packed to 16-bit pairs; movmatrix.trans (PTX ISA,
// "movmatrix") turns it into m × n, so lane (gq, t) holds y[8j + gq][2t, 2t +
// 1]: 4 bytes of row m. Each warpgroup's 64 n of a row are 128 bytes (one
// "half" per warpgroup), 16-byte piece c of row r at piece c ^ (r % 8): the
// 8 rows of one store (gq) land in 8 distinct bank groups. Reading: thread i
// takes piece i % (8·kGroups) of row i / (8·kGroups) (and so on by
// kMmaThreads), the 8 lanes of a 16-byte load phase reading one row's 8
// pieces of a half. The bias and the clamp come first, so y is rounded once
// (a residual would come after that rounding: the key excludes it).
constexpr int kStageRows = 64;
constexpr int kStageHalf = kStageRows * 128;  // one warpgroup's 64 n of the pass's rows
constexpr int kStageYOffset = kStages * kSbStage + (kASmem ? kGroups * 2 * kSaStage : 0);  // past sB and sA
static_assert(kBlockRows % kStageRows == 0, "whole passes of 64 rows of x");
static_assert(!kStageY || !kHasResidual, "y through shared memory is rounded before a residual could be added");

// A barrier of the kMmaThreads threads that multiply (named barrier 14: 0 is
// the block's, 1 .. kGroups the warpgroups', 15 the stream finishers').
__device__ __forceinline__ void mma_threads_sync() { asm volatile("bar.sync 14, %0;" ::"n"(kMmaThreads) : "memory"); }

// The epilogue of the block's output tile through shared memory: warp w
// holds tile `tile` (the block's tile w), rows m0 .. m0 + kBlockRows of x.
__device__ __forceinline__ void store_tile_staged(const float (&acc)[kAcc], int tile, int m0, int M, int lane,
                                                  const TX* __restrict__ bias, TX* y, unsigned char* sb) {
  const int w = static_cast<int>(threadIdx.x) / 32, gq = lane / 4, t = lane % 4;
  const int block_n = (tile - w) * 16;  // the block's first row of n
  unsigned char* stage = sb + kStageYOffset;
  float b[2] = {0.0f, 0.0f};
  if constexpr (kHasBias)
    if (tile < kNTiles) b[0] = qjit::to_f32(bias[tile * 16 + gq]), b[1] = qjit::to_f32(bias[tile * 16 + gq + 8]);
  unsigned char* mine = stage + (w / 4) * kStageHalf + gq * 128 + t * 4;  // row gq of the warp's half
#pragma unroll
  for (int pass = 0; pass < kBlockRows / kStageRows; ++pass) {
#pragma unroll
    for (int jj = 0; jj < kStageRows / 8; ++jj) {
      const int j = pass * (kStageRows / 8) + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        unsigned v = pack2(clamp_act(acc[4 * j + 2 * h] + b[h]), clamp_act(acc[4 * j + 2 * h + 1] + b[h]));
        asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(v) : "r"(v));
        *reinterpret_cast<unsigned*>(mine + jj * 8 * 128 + ((2 * (w % 4) + h) ^ gq) * 16) = v;
      }
    }
    mma_threads_sync();  // the pass's rows are written
    constexpr int kRowPieces16 = 8 * kGroups;
#pragma unroll
    for (int step = 0; step < kStageRows * kRowPieces16 / kMmaThreads; ++step) {
      const int i = static_cast<int>(threadIdx.x) + step * kMmaThreads;
      const int row = i / kRowPieces16, half = (i % kRowPieces16) / 8, piece = i % 8;
      const uint4 v = *reinterpret_cast<const uint4*>(stage + half * kStageHalf + row * 128 + (piece ^ (row % 8)) * 16);
      const int m = m0 + pass * kStageRows + row, n = block_n + half * 64 + piece * 8;
      if (m < M && n < kN) *reinterpret_cast<uint4*>(y + static_cast<long long>(m) * kN + n) = v;
    }
    mma_threads_sync();  // the pass's rows are read before the next pass (or tile) writes
  }
}
