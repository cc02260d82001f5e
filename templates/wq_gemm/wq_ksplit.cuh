#pragma once
// k split between blocks (kKSplit > 1) for the small-M mma kernel: block
// (x, 0, z) of the grid sums chunks [kChunks·z/kKSplit, kChunks·(z+1)/kKSplit)
// for its kGroupsPerBlock row groups. Why: at M = 16 a block per row group
// reads every chunk of x from L2 for two tiles of weights (x's bytes are
// twice the weights'); a block of several row groups reads each chunk once
// into L1 for all of them, and splitting k keeps the grid at a few blocks
// per SM (BENCHMARKS.md, session 17).
//
// The pieces of a row group meet in the workspace (runtime-owned, one per
// stream, zeroed when allocated):
//   [0, kKSplitCounterBytes)  one counter per row group of the grid: pieces
//                             stored so far
//   then                      kKSplit pieces per row group, piece z at
//                             (g·kKSplit + z)·kKSplitPieceFloats: warp
//                             part 0's kKSplitAccWords accumulators,
//                             [word][lane]
// Each block's part-0 warp stores its piece and counts it with one atomic
// add (release and acquire). The block that brings the count to kKSplit
// (whichever finishes last: no block waits for another, so nothing depends
// on dispatch order) sums the pieces in z order, so the result does not
// depend on timing, sets the counter back to 0 for the next launch (which
// touches it only after waiting for this grid) and stores the row group.
static_assert(kKSplit == 1 || kBucketM <= kMBlock, "k split between blocks covers the bucket's rows in one pass");
static_assert(kKSplit == 1 || kBalance == 0, "the balanced schedule splits k its own way");

constexpr int kKSplitAccWords = kTiles * kMTiles * 4;  // a lane's accumulators
constexpr int kKSplitPieceFloats = kKSplitAccWords * 32;
constexpr int kKSplitRowGroups = (kNTiles + kTiles * kGroupsPerBlock - 1) / (kTiles * kGroupsPerBlock) * kGroupsPerBlock;
// codegen/ops/wq_mainloop.cpp's workspace_fixed: the counters, padded.
constexpr int kKSplitCounterBytes = (kKSplitRowGroups * 4 + 255) / 256 * 256;

// Chunk range [first, end) of k-part z.
__device__ __forceinline__ int ksplit_chunk(int z) { return static_cast<int>(static_cast<long long>(kChunks) * z / kKSplit); }

// Warp part 0 of row group g with its piece z (acc). Returns true in the
// block that completes the row group, with acc replaced by the sum of all
// pieces; false in the others, which have stored theirs.
__device__ __forceinline__ bool ksplit_finish(int g, int z, int lane, void* workspace,
                                              float (&acc)[kTiles][kMTiles][4]) {
  unsigned* counter = static_cast<unsigned*>(workspace) + g;
  float* pieces = reinterpret_cast<float*>(static_cast<char*>(workspace) + kKSplitCounterBytes) +
                  static_cast<long long>(g) * kKSplit * kKSplitPieceFloats;
  float* mine = pieces + z * kKSplitPieceFloats;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) __stcg(mine + ((i * kMTiles + j) * 4 + e) * 32 + lane, acc[i][j][e]);
  // __syncwarp orders every lane's stores before lane 0's add; the release
  // is cumulative (PTX ISA, memory consistency model), so the block whose
  // add reads this one's (acquire) sees them. The adds on one counter form
  // a release sequence: the last one acquires every piece.
  __syncwarp();
  unsigned before = 0;
  if (lane == 0)
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
  before = __shfl_sync(0xffffffffu, before, 0);
  if (before != kKSplit - 1) return false;
  __syncwarp();  // lane 0's acquire, for every lane's reads
  // Unrolled: every piece's loads go out at once (one L2 round trip at the
  // end of the kernel, not kKSplit in a row).
  float sum[kTiles][kMTiles][4];
  zero_acc(sum);
#pragma unroll
  for (int v = 0; v < kKSplit; ++v) {
    const float* p = pieces + v * kKSplitPieceFloats;
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sum[i][j][e] += v == z ? acc[i][j][e] : __ldcg(p + ((i * kMTiles + j) * 4 + e) * 32 + lane);
  }
  if (lane == 0) *counter = 0;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = sum[i][j][e];
  return true;
}
