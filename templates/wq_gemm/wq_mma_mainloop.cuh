#pragma once
// The weight-quantized mainloop on the tensor cores for small M: sums
// Σ_k x[m][k]·w[k][n] with w dequantised in registers from qjit's native
// layout (wq_dequant.cuh), never written out. Included by wq_gemm_mma.cu
// (Y = X·Wᵀ, bias, clamp, residual) and by fused_ffn_wq.cu (W1 and W3 in one
// pass, SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ)); each kernel adds its grid mapping and
// epilogue.
//
// Reads from the generated qjit_spec: TX, TS, kK, kN, kBucketM, kBits, kGroup,
// kZeroMode, kMatrices and the tunables kWarps, kSplitK, kTiles, kMTiles,
// kUnroll, kStages, kL2Ahead, kZeroAfter, kXRegs (codegen/ops/wq_mainloop.cpp).
//
// W is the A operand, so even M = 1 fills a tile's rows with weights and only
// the 8 columns of B are partly idle: reading W, not multiplying, is the cost
// at small M. With g >= 64 and an integer zero the tensor cores multiply
// q - z and each chunk's sums are scaled once in fp32 (kScaleAfter).
//
// Work split: a block has kWarps / kSplitK row groups of kTiles tile slots; the
// kSplitK warps of a group take every kSplitK-th chunk of 64 k and add their
// accumulators through shared memory. blockIdx.y passes over 8·kMTiles rows of
// x at a time (looping when M exceeds the grid, the m = 1024 bucket). Loads
// are software-pipelined in registers (kUnroll chunks ahead in rotating
// buffers with x for M <= 16, groups of kUnroll chunks beyond; see
// wq_accumulate), or (kStages > 0) streamed with x and the scales through a
// cp.async ring; either may ask L2 for the weights kL2Ahead chunks further
// ahead (prefetch_chunk_l2).
#include "qjit/wq_gemm/wq_dequant.cuh"

constexpr int kThreads = kWarps * 32;
constexpr int kGroupsPerBlock = kWarps / kSplitK;
constexpr int kTilesPerMatrix = kTiles / kMatrices;  // 16-row tiles of n a row group computes
constexpr int kMBlock = 8 * kMTiles;
constexpr int kXRows = kBucketM < kMBlock ? kBucketM : kMBlock;  // rows of x one pass can use
static_assert(kWarps % kSplitK == 0, "kSplitK must divide kWarps");
static_assert(kTiles % kMatrices == 0, "a row group has the same tiles of every matrix");
static_assert(kMBlock <= (kBucketM < 8 ? 8 : kBucketM), "a pass covers at most the bucket's rows");

// The kernel's inputs. A row group's tile slots i = 0 .. kTiles-1 hold matrix
// i % kMatrices at tile tile0 + i / kMatrices (kMatrices = 2: fused_ffn's W1
// and W3 side by side, sharing x and the row group's output rows).
struct Operands {
  const TX* x;
  const unsigned* q[kMatrices];
  const TS* s[kMatrices];
  const void* z[kMatrices];
};

// Matrix of slot i for an i known only at run time: a select, not an array
// index (a struct array indexed before unrolling lands in local memory).
__device__ __forceinline__ const unsigned* qweight_of(const Operands& op, int i) {
  return kMatrices == 1 || i % kMatrices == 0 ? op.q[0] : op.q[kMatrices - 1];
}
__device__ __forceinline__ const TS* scales_of(const Operands& op, int i) {
  return kMatrices == 1 || i % kMatrices == 0 ? op.s[0] : op.s[kMatrices - 1];
}
__device__ __forceinline__ const void* zeros_of(const Operands& op, int i) {
  return kMatrices == 1 || i % kMatrices == 0 ? op.z[0] : op.z[kMatrices - 1];
}

// Programmatic dependent launch: qjit::wait_for_previous_grid() comes after
// the first weight loads and before x is read (qjit_common.cuh).
using qjit::allow_next_grid;
using qjit::wait_for_previous_grid;

// Timeline marks for tests/probe/timeline_probe.cpp, which compiles the
// kernel with QJIT_TIMELINE defined; otherwise they are empty. Lane 0 of
// each warp records %globaltimer at: 0 entry, 1 past the wait for the
// previous grid, 2 end of its own chunks (before the split-k sum), 3 after
// the epilogue, and in slot 4 the SM it ran on (wq_gemm_mma.cu sets 0 and
// 3; fused_ffn_wq.cu has no timeline). Per warp, not per block: a block's
// warps end their chunks at different times, and where they run different
// schedules (the balanced schedule's pieces) thread 0 alone hides the rest.
// Launch r of the chain writes row r (the warp's own run count: a grid's
// blocks are all dispatched before the next grid's).
#ifdef QJIT_TIMELINE
constexpr int kTimelineBlocks = 4096, kTimelineRuns = 8, kTimelineWarps = 16;
__device__ unsigned qjit_timeline_runs[kTimelineBlocks][kTimelineWarps];
__device__ unsigned long long qjit_timeline[kTimelineRuns][kTimelineBlocks][kTimelineWarps][5];
__device__ __forceinline__ void timeline_mark(int point) {
  __shared__ unsigned run[kTimelineWarps];
  const unsigned block = blockIdx.x + gridDim.x * blockIdx.y, warp = threadIdx.x / 32;
  if (threadIdx.x % 32 != 0 || block >= kTimelineBlocks || warp >= kTimelineWarps) return;
  if (point == 0) run[warp] = atomicAdd(&qjit_timeline_runs[block][warp], 1u);
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (run[warp] >= kTimelineRuns) return;
  qjit_timeline[run[warp]][block][warp][point] = t;
  if (point == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    qjit_timeline[run[warp]][block][warp][4] = sm;
  }
}
#define QJIT_MARK(point) timeline_mark(point)
#else
#define QJIT_MARK(point)
#endif

// base + i·step bytes as one 32 × 32 -> 64-bit multiply-add (IMAD.WIDE.U32).
// Written as 64-bit C++ arithmetic, ptxas rebuilt the loop's copy addresses
// from the tile index every unit, or added the high word separately (3-4
// instructions an address).
__device__ __forceinline__ const char* advance(const void* base, unsigned i, unsigned step) {
  unsigned long long at;
  asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(at) : "r"(i), "r"(step), "l"(base));
  return reinterpret_cast<const char*>(at);
}

// The lane's rows of x for one pass, at its k offset 16·(lane % 4) of chunk
// 0: chunk kc's B fragments start 64·kc further. The ring with x_regs
// computes them once per pass, so a chunk's loads cost one address each
// (recomputed per chunk, the 64-bit row arithmetic and the clamp took 15
// instructions per chunk at M = 16).
// A row m >= M points at row M - 1: row m of x reaches only column m of the
// product, which is never stored for m >= M, and a valid row needs neither
// a branch nor zeroing (16 moves per chunk at M = 16 when these rows were
// zeros).
struct XRows {
  const TX* row[kMTiles];
};
__device__ __forceinline__ XRows x_rows(const TX* __restrict__ x, int m0, int M, int lane) {
  XRows r;
#pragma unroll
  for (int j = 0; j < kMTiles; ++j)
    r.row[j] = x + static_cast<long long>(min(m0 + 8 * j + lane / 4, M - 1)) * kK + 16 * (lane % 4);
  return r;
}

// B fragments of one 8-row tile of x for a chunk from p = its row at the
// lane's k: 16 values as 8 words of two TS values.
template <typename T>
__device__ __forceinline__ void load_x(const T* __restrict__ p, unsigned (&b)[8]) {
  if constexpr (sizeof(T) == 4) {
    float f[16];
    qjit::load_f32<float, 16, false>(p, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) b[i] = pack2(f[2 * i], f[2 * i + 1]);
  } else {
    b_from_16bit<T>(qjit::load_raw16<false>(p), qjit::load_raw16<false>(p + 8), b);
  }
}

// --- dequantisation ----------------------------------------------------------

// Scale after the mma: when a chunk's 64 k lie in one group (g >= 64) and the
// zero is an integer, sum_k (q - z)·s·x = s · sum_k (q - z)·x. The tensor
// cores then multiply the exact small integers q - z, and each chunk's partial
// sum is scaled once in fp32 (4 FFMA per chunk and tile instead of a multiply
// per register). It skips the reference's rounding of w to the scale type, so
// it is at least as close to the exact product; the float zero mode and g = 32
// (a chunk spans two groups) scale each weight as the reference does.
constexpr bool kScaleAfter = kGroup >= 64 && kZeroMode != 2;

// Zero after the mma (kZeroAfter, fp16 with 4 or 8 bits and kScaleAfter):
// the tensor cores multiply the magic values v = 1024 + q·2^r of
// magic_fields as they are, which saves the fma per register that makes
// them q - z. With X = Σ_k x[k] over the chunk (four more mma per chunk with
// A = 1, shared by every tile) each row's sum is then corrected once:
//   Σ (q - z)·x = 2^-r · Σ v·x - (1024·2^-r + z) · X.
// r is one value per row: the even registers R are row gq and
// have r = magic_shift(0), the odd ones row gq + 8 and magic_shift(1) (0 and
// 4 for 4 bits, 0 for 8). v < 2048 is exact in fp16 and v·x in fp32; the fp32
// sums of v·x are about 1024/|q - z| times larger than the result, so their
// rounding weighs that much more (measured in the tuner's verification, like
// every candidate's).
constexpr bool kZeroAfterMode = kZeroAfter != 0;
static_assert(!kZeroAfterMode || (kHalf && kScaleAfter && (kBits == 4 || kBits == 8)),
              "zero after the mma needs fp16, an integer zero, g >= 64 and 4 or 8 bits");
static_assert(!kZeroAfterMode || (magic_shift(0) == magic_shift(2) && magic_shift(1) == magic_shift(3)),
              "each row's registers share one shift");

// Sets a row group's accumulators (or a sum of them) to zero.
__device__ __forceinline__ void zero_acc(float (&acc)[kTiles][kMTiles][4]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
}

// --- one chunk on the tensor cores ---------------------------------------------

// A chunk's operands in registers: the lane's weight words, the raw
// scales/zeros of its two rows per tile, and the B fragments of x.
struct Chunk {
  unsigned w[kTiles][kBits];
  RowRaw rows[kTiles][2];  // rows gq, gq + 8 of each tile
  unsigned b[kMTiles][8];
};

constexpr int kChains = kMTiles >= 2 || kTiles >= 2 ? 1 : 2;  // partial-sum chains per tile (see mma_chunk)

// Chunk pairs (kPair): a warp takes chunks 2m and 2m + 1 together, in one
// group of scales (128 | kGroup, so the pair never straddles two), and
// sums both chunks' products in the same partial sums: the row parameters,
// the zeroing of the partial sums and the scale's fma (with kZeroAfter,
// the zero's correction) come once per two chunks instead of once per
// chunk (the M = 1 ring of two tiles: about 168 PTX instructions a chunk
// instead of 229). At M = 1 issuing instructions sets the pace on an H200:
// without its dequantisation (64 instructions a chunk) the winner at
// 4096 × 11008 ran 7.15 µs instead of 8.82 (docs/wq_gemm_small_m.md). A
// pair also travels in one ring slot (stream_chunks): its scales and zeros
// copied once, one wait (311 -> 269 SASS instructions a pair in that ring;
// 8.13 -> 7.73 µs, and 9.33 -> 8.18 at 11008 × 4096, H200).
constexpr bool kPairMode = kPair != 0;
static_assert(!kPairMode || (kScaleAfter && kGroup % 128 == 0 && kStages > 0 && kBalance == 0),
              "chunk pairs share one group's scale, applied after the mma (128 | g), in the cp.async ring of a block "
              "per row group");

// kCount chunks of one group of scales (the second, with kPair, is c1)
// summed in the same partial sums and scaled once.
template <int kCount>
__device__ __forceinline__ void mma_chunks(const Chunk& c, const Chunk& c1, float (&acc)[kTiles][kMTiles][4]) {
  static_assert(kCount == 1 || (kCount == 2 && kPairMode), "two chunks at once are kPair's");
  float xsum[kMTiles][4];  // kZeroAfter: X of the lane's columns (every row of the product holds it)
  if constexpr (kZeroAfterMode) {
    constexpr unsigned kOnes = 0x3c003c00u;  // fp16 1.0 in both halves
    // Two chains (even and odd steps), added at the end: one chain of 4·kCount
    // dependent mma waited on the tensor core's latency (with pairs, 8 in a row).
    float half[2][kMTiles][4];
#pragma unroll
    for (int j = 0; j < kMTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) half[0][j][e] = half[1][j][e] = 0.0f;
#pragma unroll
      for (int q = 0; q < kCount; ++q) {
        const Chunk& cq = q == 0 ? c : c1;  // one group: one correction for both chunks' X
#pragma unroll
        for (int s = 0; s < 4; ++s)
          qjit::mma_16816<TS>(half[s % 2][j], kOnes, kOnes, kOnes, kOnes, cq.b[j][2 * s], cq.b[j][2 * s + 1]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) xsum[j][e] = half[0][j][e] + half[1][j][e];
    }
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const RowParams rp[2] = {row_params(c.rows[i][0]), row_params(c.rows[i][1])};
    // Two accumulator chains (even and odd k16 steps) where a row group has
    // one tile and one tile of x: four dependent mma in a row would leave
    // the tensor core waiting on its own latency. Two tiles of x, or two
    // tiles of W (interleaved by the unrolled loops), are independent chains
    // already, and a second chain would cost a zeroing and an add per
    // accumulator and chunk (16 + 16 instructions of a tile's ~120 at
    // M = 16). With kScaleAfter they hold the chunk's sum of (q - zero)·x.
    float part[kChains][kMTiles][4];
#pragma unroll
    for (int h = 0; h < kChains; ++h)
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[h][j][e] = 0.0f;
#pragma unroll
    for (int q = 0; q < kCount; ++q) {
      const Chunk& cq = q == 0 ? c : c1;  // c's row parameters serve both (one group)
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        // A fragment r belongs to row gq + 8(r%2).
        unsigned a[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          if constexpr (kZeroAfterMode) magic_fields(cq.w[i], a_reg(s, r), a[r]);
          else a[r] = dequant2<kScaleAfter>(cq.w[i], a_reg(s, r), rp[r % 2]);
        }
#pragma unroll
        for (int j = 0; j < kMTiles; ++j)
          qjit::mma_16816<TS>(part[s % kChains][j], a[0], a[1], a[2], a[3], cq.b[j][2 * s], cq.b[j][2 * s + 1]);
      }
    }
    // Accumulator e belongs to row gq + 8(e/2).
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float sum = kChains == 1 ? part[0][j][e] : part[0][j][e] + part[kChains - 1][j][e];
        if constexpr (kZeroAfterMode) {
          constexpr float kInv[2] = {1.0f / (1 << magic_shift(0)), 1.0f / (1 << magic_shift(1))};
          const float inv = kInv[e / 2], sf = rp[e / 2].sf;
          acc[i][j][e] = fmaf(sum, sf * inv, fmaf(-sf * fmaf(1024.0f, inv, rp[e / 2].zf), xsum[j][e], acc[i][j][e]));
        } else {
          acc[i][j][e] = kScaleAfter ? fmaf(sum, rp[e / 2].sf, acc[i][j][e]) : acc[i][j][e] + sum;
        }
      }
  }
}

__device__ __forceinline__ void mma_chunk(const Chunk& c, float (&acc)[kTiles][kMTiles][4]) { mma_chunks<1>(c, c, acc); }

// --- register pipeline (kStages == 0) ----------------------------------------

// Weights and scales/zeros of chunk kc, loaded kUnroll chunks ahead.
__device__ __forceinline__ void load_chunk(const Operands& op, const int (&tile)[kTiles], int kc, int lane, Chunk& c) {
  const int gq = lane / 4, t = lane % 4;
  const int group = (kc * 64 + 16 * t) / kGroup;  // a lane's 16 k never straddle a group (g >= 32)
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    load_tile(qweight_of(op, i) + (static_cast<long long>(tile[i]) * kChunks + kc) * 32 * kBits, lane, c.w[i]);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      c.rows[i][h] = load_row(scales_of(op, i), zeros_of(op, i), group, tile[i] * 16 + gq + 8 * h);
  }
}

// x's B fragments of chunk kc (x is small and shared by every warp: L1 or L2).
__device__ __forceinline__ void load_x_frags(const XRows& xr, int kc, unsigned (&b)[kMTiles][8]) {
#pragma unroll
  for (int j = 0; j < kMTiles; ++j) load_x(xr.row[j] + kc * 64, b[j]);
}
// The same, each address one multiply-add (advance): the pair loop's x loads
// took 717 -> 673 SASS instructions per two pairs at M = 16; the plain x_regs
// ring's, 418 -> 455 per two chunks, so it keeps load_x_frags.
__device__ __forceinline__ void load_x_frags_mad(const XRows& xr, int kc, unsigned (&b)[kMTiles][8]) {
#pragma unroll
  for (int j = 0; j < kMTiles; ++j) load_x(reinterpret_cast<const TX*>(advance(xr.row[j], kc, 64 * sizeof(TX))), b[j]);
}
// The register pipeline's x for chunk kc, addressed from scratch: it holds
// kUnroll + 1 chunks in registers, and keeping XRows live as well cost it
// 16 instructions per chunk at M = 16 (ptxas, sm_90), more than it saves.
__device__ __forceinline__ void load_x_chunk(const TX* __restrict__ x, int kc, int m0, int M, int lane, Chunk& c) {
#pragma unroll
  for (int j = 0; j < kMTiles; ++j)
    load_x(x + static_cast<long long>(min(m0 + 8 * j + lane / 4, M - 1)) * kK + kc * 64 + 16 * (lane % 4), c.b[j]);
}

// tile[i] for an i known only at run time (indexing the array would put it in local memory).
__device__ __forceinline__ int tile_of(const int (&tile)[kTiles], int i) {
  return min(tile[0] + i / kMatrices, kNTiles - 1);
}

// --- L2 look-ahead (kL2Ahead > 0) ---------------------------------------------

// Asks L2 for chunk kc's weights, scales and zeros without waiting for them
// or holding a register: lane i < kTiles takes tile slot i's weights (32·kBits
// contiguous words in the native layout), lane kTiles + i the line of its
// scales and lane 2·kTiles + i the line of its zeros (per group of the chunk).
// The pipelines call it kL2Ahead chunks ahead of their own loads, so loads
// find their bytes on chip: more bytes in flight per SM than registers or
// shared memory hold (a tuning key: it wins some small-M shapes on an H100
// and loses others, docs/wq_gemm_small_m.md).
__device__ __forceinline__ void prefetch_chunk_l2(const Operands& op, const int (&tile)[kTiles], int kc, int lane) {
  const int i = lane % kTiles, what = lane / kTiles;
  const int t = tile_of(tile, i);
  if (what == 0) {
    const unsigned* w = qweight_of(op, i) + (static_cast<long long>(t) * kChunks + kc) * 32 * kBits;
    if constexpr (kBits % 4 == 0) {  // 16-byte aligned (the runtime checks qweight), 128·kBits bytes
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w), "n"(128 * kBits) : "memory");
    } else {
#pragma unroll
      for (int l = 0; l < kBits; ++l) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + 32 * l) : "memory");
    }
  } else if (what == 1 || (what == 2 && kZeroMode != 0)) {
#pragma unroll
    for (int gi = 0; gi < kGroupsPerChunk; ++gi) {
      const long long at = static_cast<long long>(kc * 64 / kGroup + gi) * kN + t * 16;
      const void* p = what == 1 ? static_cast<const void*>(scales_of(op, i) + at)
                                : static_cast<const void*>(static_cast<const unsigned char*>(zeros_of(op, i)) + at * kZeroBytes);
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p) : "memory");
    }
  }
}

// Before the grid waits for its predecessor: asks L2 for the lines of x that
// the warp's chunks number [0, n) will read after the wait. x may still be
// being written by the previous grid, but L2 is where global writes land, so
// the values read after the wait are the new ones (nothing is loaded into L1
// or registers here). The first multiply then waits for an L2 hit, not DRAM
// (x is still in L2 in a real chain; this helps most where a warp has few
// chunks, e.g. 4096² at M = 1).
__device__ __forceinline__ void prefetch_x_l2(const TX* __restrict__ x, int part, int n, int count, int m0, int M,
                                              int lane) {
  if constexpr (kL2Ahead > 0) {
    constexpr int kLines = 64 * int(sizeof(TX)) / 128;  // 128-byte lines per row of a chunk
    const int rows = min(kXRows, M - m0), chunks = min(n, count);
    for (int p = lane; p < chunks * rows * kLines; p += 32) {
      const int j = p / (rows * kLines), r = p / kLines % rows, h = p % kLines;
      const TX* line = x + static_cast<long long>(m0 + r) * kK + (part + j * kSplitK) * 64 + h * (128 / int(sizeof(TX)));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(line) : "memory");
    }
  }
}

// Prefetches the warp's chunks number [from, to) (chunk part + j·kSplitK for number j) that exist.
__device__ __forceinline__ void prefetch_chunks_l2(const Operands& op, const int (&tile)[kTiles], int part, int from,
                                                   int to, int count, int lane) {
  if constexpr (kL2Ahead > 0) {
    for (int j = from; j < to && j < count; ++j) prefetch_chunk_l2(op, tile, part + j * kSplitK, lane);
  }
}

// --- cp.async ring (kStages > 0; wq_warp_ring.cuh) ------------------------------

#include "qjit/wq_gemm/wq_warp_ring.cuh"


// --- one pass: a row group's sums for rows m0 .. m0 + 8·kMTiles of x ------------

// The row group's tile slots (tile[i] = slot i's tile of n, see Operands) for
// 8·kMTiles rows of x from m0, summed over k. On return the warp with
// part == 0 holds the sums: accumulator e of lane (gq, t) is row
// gq + 8(e/2) of the slot's tile (a column n of y) and column 2t + e%2 of B
// (row m0 + 8j + 2t + e%2 of x, for mtile j). The row group sums chunks
// [chunk0, end) (the balanced schedule passes a piece of k); the warp takes
// chunk0 + part, + kSplitK, ...
__device__ __forceinline__ void wq_accumulate(const Operands& op, const int (&tile)[kTiles], int part, int m0, int M,
                                              int lane, int warp, float (&acc)[kTiles][kMTiles][4], int chunk0 = 0,
                                              int end = kChunks) {
  // The warp's chunks: first_chunk, + kSplitK, ... < end (with kPair: pairs from first_chunk, + 2·kSplitK, ...).
  const int first_chunk = chunk0 + (kPairMode ? 2 * part : part);
  zero_acc(acc);
  if constexpr (kStages > 0) {
    stream_chunks(op, tile, first_chunk, end, m0, M, lane, warp, acc);  // waits for the previous grid before copying x
  } else {
    // Register pipelines. x is read from L1/L2 (small, shared by every warp).
    // With at most two tiles of x (M <= 16) it is loaded with the weights,
    // kUnroll chunks ahead of the mma, in kUnroll + 1 rotating register
    // buffers (chunk i of the warp in buffer i % kBuffers). The loop body is
    // unrolled over one rotation, so every buffer index is a constant and no
    // register is copied: a copy would wait for the loads just issued. Small M
    // is latency-bound (bytes in flight per SM set the pace), and the
    // rotation keeps kUnroll chunks of weights and x in flight.
    // Wider x would need too many registers ahead; it is read at multiply
    // time, and groups of kUnroll chunks are loaded one group ahead (the copy
    // of next into cur waits for them once per group; measured faster at
    // M = 64 than the rotation, whose twice-unrolled body is large there).
    constexpr bool kXAhead = kMTiles <= 2;
    const int count = first_chunk < end ? (end - 1 - first_chunk) / kSplitK + 1 : 0;
    if constexpr (kXAhead) {
      constexpr int kBuffers = kUnroll + 1;
      Chunk buf[kBuffers];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (u < count) load_chunk(op, tile, first_chunk + u * kSplitK, lane, buf[u]);
      prefetch_chunks_l2(op, tile, first_chunk, kUnroll, kUnroll + kL2Ahead, count, lane);
      prefetch_x_l2(op.x, first_chunk, kUnroll, count, m0, M, lane);
      wait_for_previous_grid();
      QJIT_MARK(1);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (u < count) load_x_chunk(op.x, first_chunk + u * kSplitK, m0, M, lane, buf[u]);
#pragma unroll 1
      for (int i0 = 0; i0 < count; i0 += kBuffers) {
#pragma unroll
        for (int b = 0; b < kBuffers; ++b) {
          const int i = i0 + b;
          if (i >= count) break;
          const int ahead = i + kUnroll;
          if (ahead < count) {
            load_chunk(op, tile, first_chunk + ahead * kSplitK, lane, buf[(b + kUnroll) % kBuffers]);
            load_x_chunk(op.x, first_chunk + ahead * kSplitK, m0, M, lane, buf[(b + kUnroll) % kBuffers]);
            prefetch_chunks_l2(op, tile, first_chunk, ahead + kL2Ahead, ahead + kL2Ahead + 1, count, lane);
          }
          mma_chunk(buf[b], acc);
        }
      }
    } else {
      Chunk cur[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (u < count) load_chunk(op, tile, first_chunk + u * kSplitK, lane, cur[u]);
      prefetch_chunks_l2(op, tile, first_chunk, kUnroll, kUnroll + kL2Ahead, count, lane);
      prefetch_x_l2(op.x, first_chunk, kUnroll, count, m0, M, lane);
      wait_for_previous_grid();
      QJIT_MARK(1);
      for (int i0 = 0; i0 < count; i0 += kUnroll) {
        Chunk next[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (i0 + kUnroll + u < count) load_chunk(op, tile, first_chunk + (i0 + kUnroll + u) * kSplitK, lane, next[u]);
        prefetch_chunks_l2(op, tile, first_chunk, i0 + kUnroll + kL2Ahead, i0 + 2 * kUnroll + kL2Ahead, count, lane);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (i0 + u < count) {
            load_x_chunk(op.x, first_chunk + (i0 + u) * kSplitK, m0, M, lane, cur[u]);
            mma_chunk(cur[u], acc);
          }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) cur[u] = next[u];
      }
    }
  }

  QJIT_MARK(2);
  if constexpr (kSplitK > 1) {
    // Lane-for-lane sum of the kSplitK warps of a row group, shared out: the
    // group's warp `part` sums accumulator slots part, part + kSplitK, ...
    // over the group and leaves the total in the first warp's row, which the
    // first warp then reads back. One warp summing every slot was a chain of
    // (kSplitK - 1)·kSlots loads at the end of every block. Each slot is
    // summed in warp order, as before.
    constexpr int kSlots = kTiles * kMTiles * 4;
    __shared__ float partial[kWarps][kSlots][32];
    const int first = warp - part;
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) partial[warp][(i * kMTiles + j) * 4 + e][lane] = acc[i][j][e];
    __syncthreads();
    for (int v = part; v < kSlots; v += kSplitK) {
      float sum = partial[first][v][lane];
#pragma unroll
      for (int s = 1; s < kSplitK; ++s) sum += partial[first + s][v][lane];
      partial[first][v][lane] = sum;
    }
    __syncthreads();
    if (part == 0) {
#pragma unroll
      for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int j = 0; j < kMTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = partial[warp][(i * kMTiles + j) * 4 + e][lane];
    }
    // partial is reused by the next pass over m (only the 1024 bucket makes more than one).
    if constexpr (kBucketM >= 1024) __syncthreads();
  }
}

// The row group's tile slots: slot i is matrix i % kMatrices at tile
// first_tile + i / kMatrices. Tiles past the last one re-read it (valid
// memory); the caller stores nothing for them.
__device__ __forceinline__ void row_group_tiles(int first_tile, int (&tile)[kTiles]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) tile[i] = min(first_tile + i / kMatrices, kNTiles - 1);
}
