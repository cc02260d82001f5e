#pragma once
// The balanced small-M schedule of the mma mainloop (kBalance > 0): a
// persistent grid of kBalance blocks per SM, every warp a worker with an
// equal run of units, a unit being one chunk of 64 k of one row group
// (kTiles tiles of 16 rows of n). With a block per row group, SMs ran 1, 2
// or 3 blocks of 4096 × 11008's 344 and finished 5.5, 7 and 10 µs into a
// launch (qjit_timeline_probe, BENCHMARKS.md session 9); equal runs end
// together. The price: row groups split between workers are summed
// through global memory.
//
// Worker w of W = min(gridDim.x · kWarps, kUnits) takes units
// [w·U/W, (w+1)·U/W) of U = kUnits, row group u / kChunks, chunk u % kChunks
// (each row group's chunks in order; neighbouring warps take neighbouring
// runs). A run is at most: the tail of one row group, whole row groups, the
// head of another. A whole row group's sums go straight to the epilogue.
// A piece of a split one is stored in the workspace; after its run the
// worker counts its pieces, and where its count completes a row group it
// adds every piece, in worker order, and runs the epilogue. Nothing waits for another block, so
// a grid larger than what fits an SM is slow but correct.
//
// Order within a run: the head of the last row group first, then the rest
// in order. Both pieces of a split row group are then stored early in
// their workers' runs (the head first in one run, the tail first in the
// next), and runs end on whole row groups where they have any.
//
// Workspace (runtime-owned, one per stream, zeroed when allocated):
//   [0, kCounterBytes)  one counter per row group: pieces stored so far; the
//                       worker that completes it sets it back to 0 for the
//                       next launch (which touches it only after waiting
//                       for this grid)
//   then                two pieces per worker (its first and its last row
//                       group), kAccWords × 32 floats each: [word][lane]
#include "qjit/wq_gemm/wq_mma_mainloop.cuh"

static_assert(kBalance == 0 || (kSplitK == 1 && kStages == 0 && kMTiles <= 2 && kBucketM <= kMBlock),
              "the balanced schedule runs the register pipeline, one warp per row group, one pass over m");

constexpr int kRowGroups = (kNTiles + kTilesPerMatrix - 1) / kTilesPerMatrix;
constexpr long long kUnits = static_cast<long long>(kRowGroups) * kChunks;
constexpr int kAccWords = kTiles * kMTiles * 4;  // a lane's accumulators
constexpr int kCounterBytes = (kRowGroups * 4 + 255) / 256 * 256;  // codegen/ops/wq_mainloop.cpp's workspace_fixed

// First unit of worker w's run (of `workers`), and the worker whose run holds unit u.
__device__ __forceinline__ long long run_start(long long w, int workers) { return w * kUnits / workers; }
__device__ __forceinline__ int worker_of(long long u, int workers) {
  // The largest w with w·U/W <= u, i.e. w·U < (u + 1)·W.
  return static_cast<int>(((u + 1) * workers - 1) / kUnits);
}

// Counts the warp's stored pieces of row groups g0 (and g1 when n = 2) in,
// lane 0 only: returns the pieces counted before each. The release fence
// makes every lane's stores (ordered before it by the caller's __syncwarp)
// visible to whoever counts after; the acquire fence makes the pieces
// counted before visible to this warp's reads. Done once, after the run:
// a fence mid-run waits for every load in flight (measured: an acq_rel
// atomic per piece cost about 5 µs per launch at 4096 × 11008).
__device__ __forceinline__ void count_pieces(unsigned* counters, int n, int g0, int g1, unsigned& before0,
                                             unsigned& before1) {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before0) : "l"(counters + g0) : "memory");
  if (n > 1)
    asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before1) : "l"(counters + g1) : "memory");
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// Where worker v keeps its piece of row group g: slot 0 if its run starts
// in g, slot 1 if g is where its run ends.
__device__ __forceinline__ float* piece_of(float* pieces, int v, int g, int workers) {
  const int slot = run_start(v, workers) >= static_cast<long long>(g) * kChunks ? 0 : 1;
  return pieces + (2LL * v + slot) * kAccWords * 32;
}

// Stores the warp's piece of row group g (a lane's accumulators, [word][lane]).
__device__ __forceinline__ void store_piece(int g, int w, int workers, int lane, void* workspace,
                                            const float (&acc)[kTiles][kMTiles][4]) {
  float* mine = piece_of(reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes), w, g, workers);
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) __stcg(mine + ((i * kMTiles + j) * 4 + e) * 32 + lane, acc[i][j][e]);
}

// If the warp's piece of g was the last counted (`before`, lane 0's count),
// adds every piece in worker order (the result does not depend on which
// worker came last), resets g's counter and runs the
// epilogue. __ldcg: the pieces come from L2, never a stale L1 line.
template <typename Emit>
__device__ __forceinline__ void complete_row_group(int g, unsigned before, int workers, int lane, void* workspace,
                                                   Emit& emit) {
  before = __shfl_sync(0xffffffffu, before, 0);
  const int first = worker_of(static_cast<long long>(g) * kChunks, workers);
  const int last = worker_of(static_cast<long long>(g) * kChunks + kChunks - 1, workers);
  if (before != static_cast<unsigned>(last - first)) return;  // a piece is still to come: its worker completes g
  __syncwarp();  // after lane 0's acquire fence, for every lane's reads
  unsigned* counters = static_cast<unsigned*>(workspace);
  float* pieces = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
  float sum[kTiles][kMTiles][4];
  zero_acc(sum);
  for (int v = first; v <= last; ++v) {
    const float* p = piece_of(pieces, v, g, workers);
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[i][j][e] += __ldcg(p + ((i * kMTiles + j) * 4 + e) * 32 + lane);
  }
  if (lane == 0) counters[g] = 0;  // the next launch counts only after this grid has finished
  emit(g, sum);
}

// Unit u's weights, scales and zeros into c (x after the wait: load_x_chunk).
__device__ __forceinline__ void load_unit(const Operands& op, int u, int lane, Chunk& c) {
  int tile[kTiles];
  row_group_tiles(u / kChunks * kTilesPerMatrix, tile);
  load_chunk(op, tile, u % kChunks, lane, c);
}

__device__ __forceinline__ void prefetch_unit_l2(const Operands& op, int u, int lane) {
  int tile[kTiles];
  row_group_tiles(u / kChunks * kTilesPerMatrix, tile);
  prefetch_chunk_l2(op, tile, u % kChunks, lane);
}

// Before the wait: asks L2 for x's lines of chunk kc (see prefetch_x_l2).
__device__ __forceinline__ void prefetch_x_chunk_l2(const TX* __restrict__ x, int kc, int M, int lane) {
  constexpr int kLines = 64 * int(sizeof(TX)) / 128;  // 128-byte lines per row of a chunk
  const int rows = min(kXRows, M);
  for (int p = lane; p < rows * kLines; p += 32)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(x + static_cast<long long>(p / kLines) * kK + kc * 64 +
                                                   p % kLines * (128 / int(sizeof(TX))))
                 : "memory");
}

// The worker's run through the register pipeline of wq_accumulate (x loaded
// with the weights, kUnroll units ahead in kUnroll + 1 rotating buffers). A
// row group's piece is finished as its last unit is multiplied: a whole row
// group goes to the epilogue, a part is stored and counted; the row groups
// whose last piece this worker counted are completed after the run.
template <typename Emit>
__device__ __forceinline__ void wq_balanced(const Operands& op, int M, int lane, int warp, void* workspace,
                                            Emit&& emit) {
  static_assert(kUnits < (1LL << 31), "units are counted in 32 bits");
  const int workers = static_cast<int>(min(static_cast<long long>(gridDim.x) * kWarps, kUnits));
  const int w = blockIdx.x * kWarps + warp;
  if (w >= workers) return;  // more warps than units: this one has none
  const int start = static_cast<int>(run_start(w, workers)), end = static_cast<int>(run_start(w + 1, workers));
  const int len = end - start;
  // Units of the head of the last row group, multiplied first (0: the run
  // ends on a whole row group, or lies in one).
  const bool spans = start / kChunks != (end - 1) / kChunks;
  const int head = spans && end % kChunks != 0 ? end % kChunks : 0;
  auto unit_at = [&](int i) {  // the run rotated left by len - head
    const int j = i - head;
    return start + (j < 0 ? j + len : j);
  };

  constexpr int kBuffers = kUnroll + 1;
  Chunk buf[kBuffers];
#pragma unroll
  for (int b = 0; b < kUnroll; ++b)
    if (b < len) load_unit(op, unit_at(b), lane, buf[b]);
  if constexpr (kL2Ahead > 0) {
#pragma unroll 1
    for (int i = kUnroll; i < kUnroll + kL2Ahead && i < len; ++i) prefetch_unit_l2(op, unit_at(i), lane);
#pragma unroll
    for (int b = 0; b < kUnroll; ++b)
      if (b < len) prefetch_x_chunk_l2(op.x, unit_at(b) % kChunks, M, lane);
  }
  wait_for_previous_grid();
  QJIT_MARK(1);
#pragma unroll
  for (int b = 0; b < kUnroll; ++b)
    if (b < len) load_x_chunk(op.x, unit_at(b) % kChunks, 0, M, lane, buf[b]);

  float acc[kTiles][kMTiles][4];
  zero_acc(acc);
  int piece = 0;                          // units of the current row group so far
  int counted = 0, g0 = 0, g1 = 0;        // parts stored (at most two) and their row groups
#pragma unroll 1
  for (int i0 = 0; i0 < len; i0 += kBuffers) {
#pragma unroll
    for (int b = 0; b < kBuffers; ++b) {
      const int i = i0 + b;
      if (i >= len) break;
      const int ahead = i + kUnroll;
      if (ahead < len) {
        const int u = unit_at(ahead);
        load_unit(op, u, lane, buf[(b + kUnroll) % kBuffers]);
        load_x_chunk(op.x, u % kChunks, 0, M, lane, buf[(b + kUnroll) % kBuffers]);
        if (kL2Ahead > 0 && ahead + kL2Ahead < len) prefetch_unit_l2(op, unit_at(ahead + kL2Ahead), lane);
      }
      mma_chunk(buf[b], acc);
      ++piece;
      const int g = unit_at(i) / kChunks;
      if (i + 1 == len || unit_at(i + 1) / kChunks != g) {
        if (piece == kChunks) {
          emit(g, acc);
        } else {
          store_piece(g, w, workers, lane, workspace, acc);
          if (counted++ == 0) g0 = g;
          else g1 = g;
        }
        piece = 0;
        zero_acc(acc);
      }
    }
  }
  QJIT_MARK(2);
  if (counted == 0) return;
  __syncwarp();  // every lane's pieces stored before lane 0's release
  unsigned before0 = 0, before1 = 0;
  if (lane == 0) count_pieces(static_cast<unsigned*>(workspace), counted, g0, g1, before0, before1);
  complete_row_group(g0, before0, workers, lane, workspace, emit);
  if (counted > 1) complete_row_group(g1, before1, workers, lane, workspace, emit);
}
