#pragma once
// The wgmma kernel's stream schedule (kStream > 0): a persistent grid that
// splits the output tiles' stages evenly between blocks, and the pieces of a
// split tile summed by the block that completes it. Included by
// wq_gemm_wgmma.cu once its ring and epilogue are defined (wq_even_runs.cuh
// holds the runs and flags it shares with the small-M balanced schedule).
//
// Output tiles (kBlockRows rows of x × 64·kGroups rows of n) number 4096 ×
// 11008's 86 at M = 256 (rows 256, 2 warpgroups), two thirds of an H100's
// 132 SMs; splitting k over clusters left SMs idle too (a GPC runs whole
// clusters) and refilled each block's ring (docs/wq_gemm_wgmma.md).
// Here a persistent grid of kStream blocks per SM (the runtime gives each
// 1/kStream of the SM's shared memory) shares the work evenly: a unit is
// one stage of one output tile, U = tiles · kIters with the tile's m-block
// fastest, and block w of W = min(gridDim.x, U) takes units [w·U/W,
// (w+1)·U/W) (as wq_balanced.cuh does for small M).
//
// A run is at most: the head of one tile, whole tiles, the tail of another,
// each a piece, done in that order. A tile split between blocks is completed
// by the last block holding a piece of it (the one whose run starts in it:
// its piece comes last in its run, when the earlier blocks, whose runs are
// as long, are done with theirs). The others store their sums in the
// workspace and release the tile's flag; it waits for the flag, adds the
// pieces in block order and runs the epilogue. (Under warp specialisation
// its producer waits for the flag and copies the parts into the ring while
// the consumers still multiply: ws_produce_parts in wq_wgmma_ws.cuh.) A
// block waits only for blocks of lower index, which the GPU dispatches
// first: no deadlock.
//
// Workspace (runtime-owned, one per stream, zeroed when allocated):
//   [0, kCounterBytes)  one flag per output tile: pieces stored so far; the
//                       completing block sets it back to 0 for the next
//                       launch (which touches it only after waiting for
//                       this grid)
//   then                one piece per block (a block stores at most one):
//                       [kAcc / 4][kMmaThreads] float4, every load and
//                       store coalesced
//
// The flags cover the output tiles of kStreamRows rows of x: the bucket's, or
// for the open 1024 bucket (any M) a cap (wq_tiled.cpp's wq_stream_rows).
// Past it the grid takes whole tiles round robin instead: block w tiles w,
// w + W, ..., no piece split, no flag.
constexpr int kNBlocks = (kNTiles + kBlockTiles - 1) / kBlockTiles;
constexpr int kMBlocksMax = (kStreamRows + kBlockRows - 1) / kBlockRows;
constexpr int kCounterBytes = (kNBlocks * kMBlocksMax * 4 + 255) / 256 * 256;  // wq_tiled.cpp's workspace_fixed
static_assert(kStream == 0 || (kSplit == 1 && kStreamRows >= kBucketM), "the stream schedule: no split, the bucket's rows");

__device__ __forceinline__ int m_blocks_of(int M) { return (M + kBlockRows - 1) / kBlockRows; }
__device__ __forceinline__ float4* piece_of(void* workspace, int w) {
  return reinterpret_cast<float4*>(static_cast<char*>(workspace) + kCounterBytes) +
         static_cast<long long>(w) * (kAcc / 4) * kMmaThreads;
}

// Piece p of this block's run: output tile t (m-block t % m_blocks, n-block
// t / m_blocks), its stages [c0, c1); t = -1 for a block without units.
struct StreamPiece {
  int t, c0, c1;
};
struct StreamRun {
  long long units;
  int workers, pieces;
  StreamPiece piece;
};
__device__ __forceinline__ StreamRun stream_run(int M, int p) {
  StreamRun r;
  // Past the flags' rows (the open bucket only; elsewhere M <= kBucketM = kStreamRows, and the branch,
  // compiled in, cost a 2-block ws config a spill): whole tiles round robin.
  if (kStreamRows > kBucketM && m_blocks_of(M) > kMBlocksMax) {
    const int tiles = m_blocks_of(M) * kNBlocks, w = blockIdx.x, workers = gridDim.x;
    r.units = static_cast<long long>(tiles) * kIters;
    r.workers = workers;
    r.pieces = w < tiles ? (tiles - 1 - w) / workers + 1 : 0;
    r.piece = r.pieces > 0 ? StreamPiece{w + p * workers, 0, kIters} : StreamPiece{-1, 0, 0};
    return r;
  }
  r.units = static_cast<long long>(m_blocks_of(M)) * kNBlocks * kIters;
  r.workers = static_cast<int>(min(static_cast<long long>(gridDim.x), r.units));
  if (static_cast<int>(blockIdx.x) >= r.workers) {
    r.pieces = 0, r.piece = {-1, 0, 0};
    return r;
  }
  const int start = run_start(blockIdx.x, r.units, r.workers), stop = run_start(blockIdx.x + 1, r.units, r.workers);
  const int ga = start / kIters, gb = (stop - 1) / kIters;
  r.pieces = gb - ga + 1;
  // The head of gb, whole tiles, then the tail of ga (one piece if ga == gb).
  const int t = r.pieces == 1 ? ga : p == 0 ? gb : p == r.pieces - 1 ? ga : ga + p;
  r.piece = {t, t == ga ? start - ga * kIters : 0, t == gb ? stop - gb * kIters : kIters};
  return r;
}

// Whether this block's piece holds its tile's last stage, and so completes the tile.
__device__ __forceinline__ bool completes_tile(const StreamRun& r) {
  return worker_of(static_cast<long long>(r.piece.t) * kIters + kIters - 1, r.units, r.workers) ==
         static_cast<int>(blockIdx.x);
}

// A barrier of the threads that finish pieces: the block, or without the
// producer under warp specialisation (which never waits for the epilogue).
__device__ __forceinline__ void finishers_sync() {
  if constexpr (kWs) asm volatile("bar.sync 15, %0;" ::"n"(kMmaThreads) : "memory");
  else __syncthreads();
}

// The workers whose parts make up split tile t: [first, last), the last
// being the block that completes it.
__device__ __forceinline__ void parts_of(const StreamRun& r, int& first, int& last) {
  const long long t = r.piece.t;
  first = worker_of(t * kIters, r.units, r.workers);
  last = worker_of(t * kIters + kIters - 1, r.units, r.workers);
}
__device__ __forceinline__ bool whole_tile(const StreamRun& r) { return r.piece.c0 == 0 && r.piece.c1 == kIters; }

// This block's piece r.piece (its p-th) in acc: stored, or completed and
// stored to y. A completing piece adds the other parts with
// add_parts(first, last, flag, acc): through L2 here (add_parts_from_l2),
// through the ring under warp specialisation (wq_wgmma_ws.cuh).
template <class AddParts>
__device__ __forceinline__ void finish_piece(const StreamRun& r, int p, bool mma, int M, int lane, void* workspace,
                                             float (&acc)[kAcc], const TX* __restrict__ bias, const TX* residual,
                                             TX* y, unsigned char* sb, AddParts&& add_parts) {
  const int t = r.piece.t, w = blockIdx.x, m_blocks = m_blocks_of(M);
  const int m0 = (t % m_blocks) * kBlockRows;
  const int tile = (t / m_blocks) * kBlockTiles + static_cast<int>(threadIdx.x) / 32;
  if (whole_tile(r)) {
    if (mma) store_tile(acc, tile, m0, M, lane, bias, residual, y, sb);
    return;
  }
  unsigned* flag = static_cast<unsigned*>(workspace) + t;
  if (!completes_tile(r)) {
    if (mma) {
      float4* mine = piece_of(workspace, w) + threadIdx.x;
#pragma unroll
      for (int j = 0; j < kAcc / 4; ++j)
        __stcg(mine + j * kMmaThreads, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
    }
    QJIT_WS_PIECE(p, 6, QJIT_WS_NOW());
    // Every thread's stores before thread 0's release, which is cumulative:
    // it publishes what the barrier ordered before it. (A fence in each
    // thread, as before, made this stage cost about 7700 cycles at 256 rows:
    // qjit_ws_probe, H100.)
    finishers_sync();
    QJIT_WS_PIECE(p, 7, QJIT_WS_NOW());
    if (threadIdx.x == 0) release_piece(flag);
    return;
  }
  int first, last;
  parts_of(r, first, last);
  add_parts(first, last, flag, acc);
  QJIT_WS_PIECE(p, 7, QJIT_WS_NOW());
  if (mma) store_tile(acc, tile, m0, M, lane, bias, residual, y, sb);
}

// The other parts of a completing piece read through L2 by the threads that
// multiply, once thread 0 has seen them all stored (the kernel without warp
// specialisation).
__device__ __forceinline__ void add_parts_from_l2(int first, int last, unsigned* flag, bool mma, void* workspace,
                                                  float (&acc)[kAcc]) {
  if (threadIdx.x == 0) acquire_pieces(flag, static_cast<unsigned>(last - first));
  finishers_sync();  // thread 0's acquire, for every thread's reads (through L2: __ldcg)
  if (!mma) return;
  for (int v = first; v < last; ++v) {
    const float4* part = piece_of(workspace, v) + threadIdx.x;
#pragma unroll
    for (int j = 0; j < kAcc / 4; ++j) {
      const float4 q = __ldcg(part + j * kMmaThreads);
      acc[4 * j] += q.x, acc[4 * j + 1] += q.y, acc[4 * j + 2] += q.z, acc[4 * j + 3] += q.w;
    }
  }
}
