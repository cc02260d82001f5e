#pragma once
// The balanced small-M schedule of the mma mainloop (kBalance > 0): a
// persistent grid of kBalance blocks per SM (the runtime gives each block
// 1/kBalance of the SM's shared memory, so exactly that many run on every
// SM), each block one row group's kSplitK warps and a worker with an equal
// run of units, a unit being one chunk of 64 k of one row group (kTiles
// tiles of 16 rows of n). With a block per row group, SMs ran 1, 2 or 3 of
// 4096 × 11008's 344 blocks and finished 5.5, 7 and 10 µs into a launch
// (qjit_timeline_probe, H100; docs/wq_gemm_small_m.md); equal runs end together.
// The price: row groups split between blocks are summed through global
// memory.
//
// Block w of W = min(gridDim.x, kUnits) takes units [w·U/W, (w+1)·U/W) of
// U = kUnits, row group u / kChunks, chunk u % kChunks. A run is at most:
// the tail of one row group, whole row groups, the head of another; each is
// a piece, which wq_accumulate sums over the block's warps (they take every
// kSplitK-th chunk of it, as in a block per row group). Warp 0 then sends a
// whole row group to the epilogue. A row group split between blocks is
// completed by the last block holding a piece of it (the one whose run
// starts in it): the others store their pieces in the workspace and
// release a flag; it waits for the flag, adds the pieces in block order
// (its own last: the result does not depend on timing) and runs the
// epilogue. A block waits only for blocks of lower index, which the GPU
// dispatches first, so the wait cannot deadlock.
//
// Order within a run: the head of the last row group first, then the whole
// row groups, then the tail of the first. The tail is the piece a block
// completes, so it comes last, when the blocks before it, whose runs are as
// long, are done with theirs: their heads came first, and a run inside one
// row group ends when this one does.
//
// Workspace (runtime-owned, one per stream, zeroed when allocated):
//   [0, kCounterBytes)  one flag per row group: pieces stored so far; the
//                       completing block sets it back to 0 for the next
//                       launch (which touches it only after waiting for
//                       this grid)
//   then                two pieces per block (of its first and its last row
//                       group): warp 0's kAccWords accumulators, [word][lane]
#include "qjit/wq_gemm/wq_mma_mainloop.cuh"
#include "qjit/wq_gemm/wq_even_runs.cuh"

static_assert(kBalance == 0 || (kGroupsPerBlock == 1 && kBucketM <= kMBlock),
              "the balanced schedule runs one row group per block and one pass over m");

constexpr int kRowGroups = (kNTiles + kTilesPerMatrix - 1) / kTilesPerMatrix;
constexpr long long kUnits = static_cast<long long>(kRowGroups) * kChunks;
constexpr int kAccWords = kTiles * kMTiles * 4;                    // a lane's accumulators
constexpr int kCounterBytes = (kRowGroups * 4 + 255) / 256 * 256;  // codegen/ops/wq_mainloop.cpp's workspace_fixed
static_assert(kUnits < (1LL << 31), "units are counted in 32 bits");

// First unit of block w's run (of `workers`), and the block whose run holds unit u.
__device__ __forceinline__ int run_start(long long w, int workers) { return run_start(w, kUnits, workers); }
__device__ __forceinline__ int worker_of(long long u, int workers) { return worker_of(u, kUnits, workers); }

// Where block v keeps its piece of row group g: slot 0 if its run starts in
// g, slot 1 if g is where its run ends.
__device__ __forceinline__ float* piece_of(void* workspace, int v, int g, int workers) {
  float* pieces = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
  const int slot = run_start(v, workers) >= g * kChunks ? 0 : 1;
  return pieces + (2LL * v + slot) * kAccWords * 32;
}

// Warp 0 of block w with its piece of row group g (chunks [c0, c1)).
template <typename Emit>
__device__ __forceinline__ void finish_piece(int g, int c0, int c1, int w, int workers, int lane, void* workspace,
                                             const float (&acc)[kTiles][kMTiles][4], Emit& emit) {
  if (c0 == 0 && c1 == kChunks) {
    emit(g, acc);
    return;
  }
  unsigned* flag = static_cast<unsigned*>(workspace) + g;
  const int first = worker_of(static_cast<long long>(g) * kChunks, workers);
  const int last = worker_of(static_cast<long long>(g) * kChunks + kChunks - 1, workers);
  if (w != last) {
    float* mine = piece_of(workspace, w, g, workers);
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) __stcg(mine + ((i * kMTiles + j) * 4 + e) * 32 + lane, acc[i][j][e]);
    // Release after __syncwarp: every lane's stores are visible to the
    // block that acquires the flag.
    __syncwarp();
    if (lane == 0) release_piece(flag);
    return;
  }
  if (lane == 0) acquire_pieces(flag, static_cast<unsigned>(last - first));
  __syncwarp();  // lane 0's acquire, for every lane's reads
  float sum[kTiles][kMTiles][4];
  zero_acc(sum);
  for (int v = first; v < last; ++v) {
    const float* p = piece_of(workspace, v, g, workers);
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[i][j][e] += __ldcg(p + ((i * kMTiles + j) * 4 + e) * 32 + lane);
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[i][j][e] += acc[i][j][e];
  emit(g, sum);
}

// The block's run, piece by piece; emit(g, sums) stores row group g (called
// by warp 0, part == 0).
template <typename Emit>
__device__ __forceinline__ void wq_balanced(const Operands& op, int M, int lane, int warp, int part, void* workspace,
                                            Emit&& emit) {
  const int workers = static_cast<int>(min(static_cast<long long>(gridDim.x), kUnits));
  const int w = blockIdx.x;
  if (w >= workers) return;  // more blocks than units: this one has none
  const int start = run_start(w, workers), end = run_start(w + 1, workers);
  const int ga = start / kChunks, gb = (end - 1) / kChunks;
  const int pieces = gb - ga + 1;
#pragma unroll 1
  for (int s = 0; s < pieces; ++s) {
    // Piece s: the head of gb, whole row groups, then the tail of ga (one piece if ga == gb).
    int g, c0, c1;
    if (pieces == 1) g = ga, c0 = start - ga * kChunks, c1 = end - ga * kChunks;
    else if (s == 0) g = gb, c0 = 0, c1 = end - gb * kChunks;
    else if (s == pieces - 1) g = ga, c0 = start - ga * kChunks, c1 = kChunks;
    else g = ga + s, c0 = 0, c1 = kChunks;
    int tile[kTiles];
    row_group_tiles(g * kTilesPerMatrix, tile);
    float acc[kTiles][kMTiles][4];
    wq_accumulate(op, tile, part, 0, M, lane, warp, acc, c0, c1);
    if (part == 0) finish_piece(g, c0, c1, w, workers, lane, workspace, acc, emit);
  }
}
