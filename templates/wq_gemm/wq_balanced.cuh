#pragma once
// The balanced small-M schedule of the mma mainloop (kBalance > 0): a
// persistent grid of kBalance blocks per SM (the runtime gives each block
// 1/kBalance of the SM's shared memory, so exactly that many run on every
// SM), each block one row group's kSplitK warps and a worker with an equal
// run of units, a unit being one chunk of 64 k of one row group (kTiles
// tiles of 16 rows of n). With a block per row group, SMs ran 1, 2 or 3 of
// 4096 × 11008's 344 blocks and finished 5.5, 7 and 10 µs into a launch
// (qjit_timeline_probe, BENCHMARKS.md session 9); equal runs end together.
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
// With kFill the block has two row groups (kSplitK warps each) on separate
// schedules: the second takes whole row groups blockIdx.x, + gridDim.x, ...
// below q·W (q = kRowGroups / W, W blocks), the first an equal run of the
// units of the row groups from q·W on, as above. An SM then carries its
// share of the work (4096 × 11008 at M = 16: 344 row groups of 2 tiles for
// 264 blocks, one whole and 0.3 of another each, where a block per row
// group put 3 on 80 SMs and 2 on 52), and the pieces, a third as long as a
// whole row group, are summed while the whole ones still stream: no sum
// waits at the end (the cost that sank splitting k between blocks,
// BENCHMARKS.md session 17). The two row groups meet at no barrier
// (row_group_sync in wq_mma_mainloop.cuh).
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

static_assert(kBalance == 0 || (kGroupsPerBlock == (kFill ? 2 : 1) && kBucketM <= kMBlock),
              "the balanced schedule runs one row group per block (two with kFill) and one pass over m");

constexpr int kRowGroups = (kNTiles + kTilesPerMatrix - 1) / kTilesPerMatrix;
constexpr long long kUnits = static_cast<long long>(kRowGroups) * kChunks;
constexpr int kAccWords = kTiles * kMTiles * 4;                    // a lane's accumulators
constexpr int kCounterBytes = (kRowGroups * 4 + 255) / 256 * 256;  // codegen/ops/wq_mainloop.cpp's workspace_fixed
static_assert(kUnits < (1LL << 31), "units are counted in 32 bits");

// The units [first, first + units) shared by `workers` blocks in equal runs.
struct Runs {
  long long first, units;
  int workers;
  // First unit of block w's run, and the block whose run holds unit u.
  __device__ __forceinline__ int start(long long w) const { return static_cast<int>(first) + run_start(w, units, workers); }
  __device__ __forceinline__ int worker(long long u) const { return worker_of(u - first, units, workers); }
};

// Where block v keeps its piece of row group g: slot 0 if its run starts in
// g, slot 1 if g is where its run ends.
__device__ __forceinline__ float* piece_of(void* workspace, int v, int g, const Runs& runs) {
  float* pieces = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
  const int slot = runs.start(v) >= g * kChunks ? 0 : 1;
  return pieces + (2LL * v + slot) * kAccWords * 32;
}

// Warp `part` 0 of block w with its piece of row group g (chunks [c0, c1)).
template <typename Emit>
__device__ __forceinline__ void finish_piece(int g, int c0, int c1, int w, const Runs& runs, int lane, void* workspace,
                                             const float (&acc)[kTiles][kMTiles][4], Emit& emit) {
  if (c0 == 0 && c1 == kChunks) {
    emit(g, acc);
    return;
  }
  unsigned* flag = static_cast<unsigned*>(workspace) + g;
  const int first = runs.worker(static_cast<long long>(g) * kChunks);
  const int last = runs.worker(static_cast<long long>(g) * kChunks + kChunks - 1);
  if (w != last) {
    float* mine = piece_of(workspace, w, g, runs);
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
    const float* p = piece_of(workspace, v, g, runs);
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

// The block's pieces: the ones of its run of `runs` (the head of the last
// row group first, whole row groups, then the tail of the first; one piece
// if the run lies in one row group), or with kFill in the second row group
// whole row groups blockIdx.x, + gridDim.x, ... below `whole`. Piece s as
// (row group, chunks [c0, c1)); false past the last.
struct Pieces {
  Runs runs;
  int whole;      // kFill's second row group: row groups below this go whole
  bool by_whole;  // this row group takes whole row groups
  int start, end, ga, count;
  __device__ __forceinline__ bool piece(int s, int& g, int& c0, int& c1) const {
    if (by_whole) {
      g = static_cast<int>(blockIdx.x) + s * static_cast<int>(gridDim.x), c0 = 0, c1 = kChunks;
      return g < whole;
    }
    if (s >= count) return false;
    const int gb = ga + count - 1;
    if (count == 1) g = ga, c0 = start - ga * kChunks, c1 = end - ga * kChunks;
    else if (s == 0) g = gb, c0 = 0, c1 = end - gb * kChunks;
    else if (s == count - 1) g = ga, c0 = start - ga * kChunks, c1 = kChunks;
    else g = ga + s, c0 = 0, c1 = kChunks;
    return true;
  }
};

// The balanced schedule of the block's warps (see the top of this file):
// one loop and one copy of the mainloop for every kind of piece (two copies
// took ptxas past the 128 registers of 2 blocks of 8 warps). emit(g, sums)
// stores row group g (called by the warp with part == 0).
template <typename Emit>
__device__ __forceinline__ void wq_balanced(const Operands& op, int M, int lane, int warp, int part, void* workspace,
                                            Emit&& emit) {
  const int blocks = static_cast<int>(gridDim.x), w = blockIdx.x;
  Pieces p{};
  // kFill: row groups [0, whole) go whole to the second row groups, the rest in runs to the first.
  p.whole = kFill ? kRowGroups / blocks * blocks : 0;
  p.by_whole = kFill && warp >= kSplitK;
  const long long first = static_cast<long long>(p.whole) * kChunks, units = kUnits - first;
  p.runs = Runs{first, units, static_cast<int>(min(static_cast<long long>(blocks), units))};
  p.count = 0;
  if (!p.by_whole && w < p.runs.workers) {  // more blocks than units: the rest have none
    p.start = p.runs.start(w), p.end = p.runs.start(w + 1);
    p.ga = p.start / kChunks;
    p.count = (p.end - 1) / kChunks - p.ga + 1;
  }
  int g, c0, c1;
#pragma unroll 1
  for (int s = 0; p.piece(s, g, c0, c1); ++s) {
    int tile[kTiles];
    row_group_tiles(g * kTilesPerMatrix, tile);
    float acc[kTiles][kMTiles][4];
    wq_accumulate(op, tile, part, 0, M, lane, warp, acc, c0, c1);
    if (part == 0) finish_piece(g, c0, c1, w, p.runs, lane, workspace, acc, emit);
  }
}
