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
// 4096 × 11008 ran 7.15 µs instead of 8.82 (BENCHMARKS.md session 25). A
// pair also travels in one ring slot (stream_chunks): its scales and zeros
// copied once, one wait (311 -> 269 SASS instructions a pair in that ring;
// 8.13 -> 7.73 µs, and 9.33 -> 8.18 at 11008 × 4096, H200, session 26).
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
// and loses others, BENCHMARKS.md session 9).
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

// --- cp.async ring (kStages > 0) -----------------------------------------------

// Each warp streams everything a chunk needs through a kStages-deep ring of
// shared-memory slots with cp.async: weights, the tiles' scales and zeros, and
// the pass's rows of x. Loads then stay kStages - 1 chunks ahead without
// holding registers, and x and the scales wait in the same queue as the
// weights instead of costing a round trip each chunk (reading x from global
// at multiply time stalls the mma on it: the profile's long-scoreboard stalls).
// A slot holds one chunk, or with kPair one pair of chunks kc, kc + 1 (h = 0, 1),
// which share their group's scales and zeros. In 32-bit words:
//   [0, kSlotWAll)     weights, [h][tile][vector][lane]: a lane copies its own vectors from
//                      their native_slot and reads them back at its own lane (conflict-free)
//   [kSlotWAll, +kSlotS) scales: [tile][group of the chunk][16 rows]
//   [.., +kSlotZ)      zero bytes or fp16 offsets, same order (none for sym)
//   [.., +kSlotX)      x[m0 + r][64·kc .. 64·kc + 64·kSlotChunks) for r < kXRows (a row past
//                      M - 1 holds row M - 1); none with kXRegs, where each lane loads its B fragments
//                      of x into registers one chunk ahead (through L1, as the
//                      register pipeline does)
// A pair in one slot costs one copy of the scales and zeros, one wait and one
// slot address where two slots of a chunk each took theirs.
// Everything is moved in 16-byte pieces: the weight vectors by their own lanes,
// the rest spread over the warp; a lane reads what others copied only after
// cp.async.wait_group and __syncwarp.
constexpr int kRingStages = kStages > 0 ? kStages : 1;
constexpr int kXPieces = 64 * int(sizeof(TX)) / 16;                        // 16-byte pieces per row of a chunk
constexpr int kSlotChunks = kPairMode ? 2 : 1;                               // chunks per slot
constexpr int kSlotW = kTiles * kBits * 32;                                   // one chunk's weights
constexpr int kSlotWAll = kSlotChunks * kSlotW;
constexpr int kXRowPieces = kSlotChunks * kXPieces;                           // 16-byte pieces of x per row of a slot
constexpr int kSlotS = kTiles * kGroupsPerChunk * 16 * 2 / 4;
constexpr int kSlotZ = kTiles * kGroupsPerChunk * 16 * kZeroBytes / 4;
constexpr bool kXInRegs = kXRegs != 0;
static_assert(!kXInRegs || kStages > 0, "x in registers is a mode of the cp.async ring");
constexpr int kSlotX = kXInRegs ? 0 : kXRows * kXRowPieces * 4;
constexpr int kSlotWords = kSlotWAll + kSlotS + kSlotZ + kSlotX;
constexpr int kSPieces = kTiles * kGroupsPerChunk * 2, kZPieces = kTiles * kGroupsPerChunk * kZeroBytes;
constexpr int kWParamPieces = kSPieces + kZPieces, kXSlotPieces = kXInRegs ? 0 : kXRows * kXRowPieces;
// Where the scales, zeros and x take more than one round of the warp's
// 16-byte copies (from M = 2 with pairs, M = 4 without), x goes in rounds of
// its own (copy_x_rounds); else all three share the lanes of one round.
constexpr bool kXOwnRounds = kWParamPieces + kXSlotPieces > 32;
constexpr int kParamPieces = kWParamPieces + (kXOwnRounds ? 0 : kXSlotPieces);
// The ring lives in dynamic shared memory, warp w's kStages slots at
// [w·kStages·kSlotWords, ...): the launch asks for exactly
// kWarps·kStages·kSlotWords·4 bytes (wq_launch_geometry; more than the 48 KB
// of static shared memory once x has 4 or more rows and the block 8 warps).
constexpr int kRingBytes = kStages > 0 ? kWarps * kStages * kSlotWords * 4 : 0;

__device__ __forceinline__ void cp_async16(unsigned* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
// x through L1 (.ca), where the weights bypass it (.cg, each read once): the
// blocks on an SM read the same chunks of x (warp `part` of each block takes
// chunks part, part + kSplitK, ...), so L1 can serve the later reads, as it
// does the register pipeline's __ldg of x. On an H100 this took 4096 × 11008
// at M = 4 from 12.15 to 10.83 µs; at M = 8 L1 hit 28% of the ring's reads.
__device__ __forceinline__ void cp_async16_l1(unsigned* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

// What copy_chunk copies: everything, or the part that does not depend on
// the previous grid (weights, scales, zeros), or only x.
enum CopyPart { kCopyAll, kCopyWeights, kCopyX };

// Where piece p < kSPieces + kZPieces of a slot (after the weights) comes
// from for chunk kc: 8 scales or 16 zero bytes (8 fp16 offsets) of a tile
// slot's rows for one group of the chunk.
__device__ __forceinline__ const char* weight_param_src(const Operands& op, const int (&tile)[kTiles], int kc, int p) {
  if (p < kSPieces) {  // 8 scales: tile p / (2G), group (p / 2) % G, half p % 2
    const int i = p / (2 * kGroupsPerChunk), gi = (p / 2) % kGroupsPerChunk, h = p % 2;
    const int group = kc * 64 / kGroup + gi;
    return reinterpret_cast<const char*>(scales_of(op, i) + static_cast<long long>(group) * kN + tile_of(tile, i) * 16 + 8 * h);
  }
  const int q = p - kSPieces;  // 16 zero bytes or 8 offsets
  const int i = q / (kZeroBytes * kGroupsPerChunk), gi = (q / kZeroBytes) % kGroupsPerChunk, h = q % kZeroBytes;
  const int group = kc * 64 / kGroup + gi;
  return static_cast<const char*>(zeros_of(op, i)) + (static_cast<long long>(group) * kN + tile_of(tile, i) * 16) * kZeroBytes +
         16 * h;
}

// The lane's pieces of a slot after the weights (piece p = 32·round + lane:
// scales, then zeros, then x, in slot order) for a ring that carries x,
// addressed once per pass so that a chunk's copy is the same few
// instructions on every lane. Piece p of chunk kc is at base + step(kc)·
// stride bytes, where step is the chunk's group for scales and zeros
// (kc·64 / kGroup; the piece's group within the chunk is in base) and kc
// itself for x. Decided per chunk, the three kinds were three branches that
// every warp ran in turn (the M = 1 ring: 215 -> 199 instructions per chunk,
// 10.0 -> 9.45 us at 4096 x 11008 on an H100). With kXRegs the slot has no
// x; the plain x_regs ring keeps copy_chunk's per-chunk branches (this change
// made it 1 us slower at M = 8 and 16 in A/Bs on one H100, BENCHMARKS.md
// session 12), while the pair ring with kXRegs takes these pieces (its loop
// at M = 16: 673 -> 639 SASS instructions per two pairs).
// Every row of x a slot holds is copied, a row past M - 1 from row M - 1
// (read_slot reads it as it reads a valid row: no zeroing, no branch).
constexpr int kParamRounds = (kParamPieces + 31) / 32;
// kXOwnRounds: a round of x's copies gives kXLanes lanes to each of 32 /
// kXLanes rows (kXLanes · 16 contiguous bytes of a row: at least 128, so a
// round touches no more 128-byte lines than whole rows would), and a lane
// copies its row's pieces l % kXLanes + kXLanes·j in kXSteps rounds, each 16
// · kXLanes bytes past the one before. Those offsets fit the copy's
// immediate (LDGSTS folds about ±2 KB; a row of x is 8 KB or more away), so
// a lane forms one address per row block instead of one per round.
// (The fewest lanes, a power of two from 8, whose row blocks don't pass the
// slot's rows; kXRows need not be a power of two: the FFN's bucket is M.)
constexpr int x_lanes_wanted() {
  int lanes = 8;
  while (lanes < 32 && lanes * kXRows < 32) lanes *= 2;
  return lanes;
}
constexpr int kXLanesWanted = x_lanes_wanted();
constexpr int kXLanes = kXLanesWanted < kXRowPieces ? kXLanesWanted : kXRowPieces;
constexpr int kXRowsPerBlock = 32 / kXLanes;
constexpr int kXSteps = kXRowPieces / kXLanes;
constexpr int kXBlocks = (kXRows + kXRowsPerBlock - 1) / kXRowsPerBlock;
static_assert(!kXOwnRounds || (32 % kXLanes == 0 && kXRowPieces % kXLanes == 0), "x's rounds cover whole rows");
struct ParamPieces {
  const char* w[kTiles];  // the lane's first weight vector of tile slot i at chunk 0
  const char* base[kParamRounds];
  int stride[kParamRounds];  // bytes per step
  bool live[kParamRounds];   // the lane has a piece
  bool is_x[kParamRounds];
  // kXOwnRounds: the lane's row in row block 0 (m0 + lane / kXLanes) and
  // first piece (16 bytes at x_col); rows past x_last = M - 1 read it.
  const char* x_col;
  int x_row, x_last;
};

__device__ __forceinline__ ParamPieces param_pieces(const Operands& op, const int (&tile)[kTiles], int m0, int M,
                                                    int lane) {
  ParamPieces pp;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
    pp.w[i] = reinterpret_cast<const char*>(qweight_of(op, i) + static_cast<long long>(tile[i]) * kChunks * 32 * kBits +
                                         native_slot(lane) * kVec);
#pragma unroll
  for (int round = 0; round < kParamRounds; ++round) {
    const int p = round * 32 + lane;
    pp.base[round] = reinterpret_cast<const char*>(op.x);
    pp.stride[round] = 0;
    pp.live[round] = p < kParamPieces;
    pp.is_x[round] = p >= kSPieces + kZPieces;
    if (p < kSPieces + kZPieces) {
      pp.base[round] = weight_param_src(op, tile, 0, p);
      pp.stride[round] = p < kSPieces ? static_cast<int>(kN * sizeof(TS)) : static_cast<int>(kN * kZeroBytes);
    } else if (p < kParamPieces) {  // x row r, piece c
      const int q = p - kSPieces - kZPieces, r = q / kXRowPieces, c = q % kXRowPieces;
      pp.base[round] = reinterpret_cast<const char*>(op.x + static_cast<long long>(min(m0 + r, M - 1)) * kK) + 16 * c;
      pp.stride[round] = 64 * static_cast<int>(sizeof(TX));
    }
  }
  pp.x_col = reinterpret_cast<const char*>(op.x) + 16 * (lane % kXLanes);
  pp.x_row = m0 + lane / kXLanes, pp.x_last = M - 1;
  return pp;
}

// kXOwnRounds: x's pieces of chunk kc (with kPair, of the pair from kc) in
// rounds of their own, kXSteps rounds for each of kXBlocks row blocks (see
// kXLanes): a row block's address is the lane's row, clamped to M - 1, and
// its rounds add immediates. No branch on whether the pass's rows are all
// < M: the clamp is one instruction a row block. At M = 16 with pairs (8
// rounds, 4 row blocks) the 4096 x 11008 loop went 365 -> 312 SASS
// instructions a pair. Before, two rows a round from one address took 3
// instructions a round (the 64-bit add of the round's 16 KB offset, which
// LDGSTS cannot fold, and the copy), plus a clamped twin for passes that
// reach past M; earlier still, a piece per lane with its own row, clamp
// and test against M took about 5.
template <int kB, int kJ>
__device__ __forceinline__ void copy_x_block(const char* row, int lane, unsigned* dst) {
  if constexpr (kJ < kXSteps) {
    if (lane / kXLanes + kB * kXRowsPerBlock < kXRows) {  // a row of the slot (false only where kXRows < 32 / kXLanes)
      constexpr int kWords = 4 * (kB * kXRowsPerBlock * kXRowPieces + kJ * kXLanes);
      const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + kWords));
      // The offset in the PTX address, a constant (hence the recursion), so ptxas keeps it in the LDGSTS.
      asm volatile("cp.async.ca.shared.global [%0], [%1+%2], 16;" ::"r"(d), "l"(row), "n"(16 * kXLanes * kJ) : "memory");
    }
    copy_x_block<kB, kJ + 1>(row, lane, dst);
  }
}
template <int kB>
__device__ __forceinline__ void copy_x_blocks(const ParamPieces& pp, const char* col, int lane, unsigned* dst) {
  if constexpr (kB < kXBlocks) {
    constexpr long long kRowBytes = static_cast<long long>(kK) * sizeof(TX);
    const int r = pp.x_row + kB * kXRowsPerBlock;
    copy_x_block<kB, 0>(col + min(r, pp.x_last) * kRowBytes, lane, dst);
    copy_x_blocks<kB + 1>(pp, col, lane, dst);
  }
}

__device__ __forceinline__ void copy_x_rounds(const ParamPieces& pp, int kc, int lane, unsigned* slot) {
  // The lane's first piece of the slot: row lane / kXLanes, piece lane % kXLanes.
  unsigned* dst = slot + kSlotWAll + kSlotS + kSlotZ + 4 * (lane / kXLanes * kXRowPieces + lane % kXLanes);
  const char* col = advance(pp.x_col, kc, 64 * sizeof(TX));
  copy_x_blocks<0>(pp, col, lane, dst);
}

template <CopyPart kPart = kCopyAll>
__device__ __forceinline__ void copy_chunk(const Operands& op, const int (&tile)[kTiles], const ParamPieces& pp, int kc,
                                           int lane, unsigned* slot) {
  constexpr bool kW = kPart != kCopyX, kXPart = kPart != kCopyWeights;
#pragma unroll
  for (int i = 0; i < kTiles && kW; ++i)
#pragma unroll
    for (int v = 0; v < kBits / kVec; ++v) {
      const unsigned* src = reinterpret_cast<const unsigned*>(advance(pp.w[i], kc, 32 * kBits * 4)) + v * 32 * kVec;
      unsigned* dst = slot + i * kBits * 32 + (v * 32 + lane) * kVec;
#pragma unroll
      for (int h = 0; h < kSlotChunks; ++h) {  // a pair's second chunk follows the first in global
        if constexpr (kVec == 4) cp_async16(dst + h * kSlotW, src + h * 32 * kBits);
        else {
          const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + h * kSlotW));
          asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src + h * 32 * kBits), "n"(4 * kVec)
                       : "memory");
        }
      }
    }
  if constexpr (kXInRegs && !kPairMode) {
#pragma unroll
    for (int round = 0; round < kParamRounds && kW; ++round) {
      const int p = round * 32 + lane;
      if (p < kParamPieces) cp_async16(slot + kSlotWAll + 4 * p, weight_param_src(op, tile, kc, p));
    }
  } else {
    const int group_step = kc * 64 / kGroup;
#pragma unroll
    for (int round = 0; round < kParamRounds; ++round) {
      const bool x_piece = pp.is_x[round];
      if (!pp.live[round] || (x_piece ? !kXPart : !kW)) continue;
      // One 32 x 32 -> 64-bit multiply-add (a signed 64-bit product took five).
      const char* src = advance(pp.base[round], x_piece ? kc : group_step, pp.stride[round]);
      unsigned* dst = slot + kSlotWAll + 4 * (round * 32 + lane);
      if (x_piece) cp_async16_l1(dst, src);
      else cp_async16(dst, src);
    }
    if constexpr (kXOwnRounds && kXPart) copy_x_rounds(pp, kc, lane, slot);
  }
}

// B fragment words of x[k .. k + 16) in shared memory (a template: only TX's branch may be instantiated).
template <typename T>
__device__ __forceinline__ void read_x(const T* p, unsigned (&b)[8]) {
  if constexpr (sizeof(T) == 4) {
    const float4* f = reinterpret_cast<const float4*>(p);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float4 v = f[e];
      b[2 * e] = pack2(v.x, v.y), b[2 * e + 1] = pack2(v.z, v.w);
    }
  } else {
    b_from_16bit<T>(reinterpret_cast<const uint4*>(p)[0], reinterpret_cast<const uint4*>(p)[1], b);
  }
}

// The lane's operands of chunk h of a slot.
template <typename T>
__device__ __forceinline__ void read_slot(const unsigned* slot, int h, int lane, Chunk& c) {
  const int gq = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int v = 0; v < kBits / kVec; ++v) {
      const unsigned* p = slot + h * kSlotW + i * kBits * 32 + (v * 32 + lane) * kVec;
      if constexpr (kVec == 4) {  // one 16-byte shared load
        const uint4 r = *reinterpret_cast<const uint4*>(p);
        c.w[i][4 * v] = r.x, c.w[i][4 * v + 1] = r.y, c.w[i][4 * v + 2] = r.z, c.w[i][4 * v + 3] = r.w;
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) c.w[i][kVec * v + j] = p[j];
      }
    }
  const int gi = kGroupsPerChunk > 1 ? (16 * t) / kGroup : 0;  // the group of the lane's 16 k
  const auto* s16 = reinterpret_cast<const unsigned short*>(slot + kSlotWAll);
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int at = (i * kGroupsPerChunk + gi) * 16 + gq + 8 * e;
      c.rows[i][e].s = s16[at];
      c.rows[i][e].zo = 0;
      if constexpr (kZeroMode == 1) c.rows[i][e].zo = reinterpret_cast<const unsigned char*>(slot + kSlotWAll + kSlotS)[at];
      if constexpr (kZeroMode == 2) c.rows[i][e].zo = reinterpret_cast<const unsigned short*>(slot + kSlotWAll + kSlotS)[at];
    }
#pragma unroll
  for (int j = 0; j < kMTiles && !kXInRegs; ++j) {
    const int r = 8 * j + gq;
    // A row past the slot's (r >= kXRows) reads its last row, and the slot's
    // rows past M - 1 hold row M - 1 (param_pieces): as in x_rows, such a
    // row reaches only a column of the product that is never stored, and a
    // valid row needs neither zeroing nor a branch (at M = 1, 8 moves and
    // about 10 address instructions a pair when such rows were zeros).
    read_x(reinterpret_cast<const T*>(slot + kSlotWAll + kSlotS + kSlotZ) + min(r, kXRows - 1) * 64 * kSlotChunks + 64 * h +
               16 * t,
           c.b[j]);
  }
}

// The pair ring's loop (kPair): pair i a pass, its two chunks multiplied
// together (c0's row parameters serve both: c1's are never read). fetch(i)
// refills the ring and returns pair i's slot; chunk_at(i) is pair i's first
// chunk. (A template, so that mma_chunks<2> exists only where pairs do.)
//
// With kXRegs the slots hold weights, scales and zeros only, and pair i + 1's
// B fragments are loaded into registers during pair i. From M = 8 on x's rows
// were most of a pair's slot (at M = 16, 4 KB of 6.5), copied by every warp
// into shared memory and read back: that traffic goes, and the same shared
// memory holds more slots. Two pairs a pass, so the two x buffers swap roles
// by name (as in the plain x_regs ring).
template <typename Fetch, typename ChunkAt>
__device__ __forceinline__ void pair_loop(Fetch& fetch, const XRows& xr, const ChunkAt& chunk_at, int count, int lane,
                                          float (&acc)[kTiles][kMTiles][4]) {
  if constexpr (!kXInRegs) {
#pragma unroll 1
    for (int i = 0; i < count; ++i) {
      const unsigned* slot = fetch(i);
      Chunk c0, c1;
      read_slot<TX>(slot, 0, lane, c0);
      read_slot<TX>(slot, 1, lane, c1);
      mma_chunks<2>(c0, c1, acc);
    }
  } else {
    auto step = [&](int i, const unsigned (&x_cur)[2][kMTiles][8], unsigned (&x_after)[2][kMTiles][8]) {
      Chunk c0, c1;
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 8; ++e) c0.b[j][e] = x_cur[0][j][e], c1.b[j][e] = x_cur[1][j][e];
      if (i + 1 < count) {
        load_x_frags_mad(xr, chunk_at(i + 1), x_after[0]);
        load_x_frags_mad(xr, chunk_at(i + 1) + 1, x_after[1]);
      }
      const unsigned* slot = fetch(i);
      read_slot<TX>(slot, 0, lane, c0);
      read_slot<TX>(slot, 1, lane, c1);
      mma_chunks<2>(c0, c1, acc);
    };
    unsigned x_a[2][kMTiles][8], x_b[2][kMTiles][8];
    if (count > 0) {
      load_x_frags_mad(xr, chunk_at(0), x_a[0]);
      load_x_frags_mad(xr, chunk_at(0) + 1, x_a[1]);
    }
#pragma unroll 1
    for (int i = 0; i < count; i += 2) {
      step(i, x_a, x_b);
      if (i + 1 < count) step(i + 1, x_b, x_a);
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ void stream_chunks(const Operands& op, const int (&tile)[kTiles], int part, int end, int m0,
                                              int M, int lane, int warp, float (&acc)[kTiles][kMTiles][4]) {
  extern __shared__ __align__(16) unsigned wq_ring_smem[];
  unsigned* const ring = wq_ring_smem + warp * kRingStages * kSlotWords;  // this warp's slots
  {
    // A launch with less shared memory than the ring would corrupt it silently: trap instead.
    unsigned dynamic_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    if (dynamic_bytes < unsigned(kRingBytes)) __trap();
  }
  // The warp's slots' worth (units) are its chunks part, part + kSplitK, ...:
  // unit i is chunk part + i·kSplitK; with kPair, unit i is the pair from
  // chunk part + 2i·kSplitK. Pairs come whole: 128 | g and g | k make kChunks
  // even, a pair starts on an even chunk, and the schedules that pass a piece
  // of k (balance) take no pairs.
  static_assert(!kPairMode || kL2Ahead == 0, "chunk pairs stream without the L2 look-ahead");
  static_assert(!kPairMode || kChunks % 2 == 0, "chunk pairs need an even number of chunks");
  const auto chunk_at = [&](int i) { return part + i * kSlotChunks * kSplitK; };
  const int count = part < end ? (end - 1 - part) / (kSlotChunks * kSplitK) + 1 : 0;
  const XRows xr = x_rows(op.x, m0, M, lane);  // kXRegs
  const ParamPieces pp = param_pieces(op, tile, m0, M, lane);
  __syncwarp();  // the previous pass over m has read every slot
  // The first kStages - 1 chunks' weights, scales and zeros go out before
  // the grid waits for its predecessor, x after it: a chain of kernels then
  // streams weights through the previous kernel's tail (a read-only stream
  // launched this way reaches 83% of the copy floor at 23.6 MB on an H100,
  // against 73% without PDL: tests/probe/read_probe.cpp). The first group
  // holds all of those weights, so chunk 0 waits for them once.
#pragma unroll
  for (int s = 0; s < kRingStages - 1; ++s)
    if (s < count) copy_chunk<kCopyWeights>(op, tile, pp, chunk_at(s), lane, ring + s * kSlotWords);
  prefetch_chunks_l2(op, tile, part, kRingStages - 1, kRingStages - 1 + kL2Ahead, count, lane);
  prefetch_x_l2(op.x, part, kRingStages - 1, count, m0, M, lane);
  wait_for_previous_grid();
  QJIT_MARK(1);
#pragma unroll
  for (int s = 0; s < kRingStages - 1; ++s) {
    if (s < count) copy_chunk<kCopyX>(op, tile, pp, chunk_at(s), lane, ring + s * kSlotWords);
    asm volatile("cp.async.commit_group;" ::: "memory");  // empty groups keep the count uniform
  }
  // fetch(i): refill the slot unit i - 1 used (with unit i + kStages - 1)
  // and wait for unit i's slot, which it returns. Unit i's slot is
  // i % kStages. Where kStages is not a power of two, that modulo cost the
  // 3-slot M = 1 pair loop 20 of its 284 instructions (multiply-by-inverse
  // sequences), so the slots are then running word offsets (units are
  // fetched in order, and unit i + kStages - 1's slot is unit i - 1's): 271.
  // For 2 and 4 slots the modulo is a mask, and the running offsets cost 6 more.
  constexpr bool kSlotsByMask = (kRingStages & (kRingStages - 1)) == 0;
  constexpr int kLastSlot = (kRingStages - 1) * kSlotWords;
  int read_at = 0, refill_at = kLastSlot;  // !kSlotsByMask: unit i's slot, unit i + kStages - 1's
  auto fetch = [&](int i) {
    __syncwarp();  // every lane has read unit i - 1's slot, which this copy refills
    const int ahead = i + kRingStages - 1;
    if constexpr (kSlotsByMask) refill_at = ahead % kRingStages * kSlotWords;
    if (ahead < count) copy_chunk(op, tile, pp, chunk_at(ahead), lane, ring + refill_at);
    prefetch_chunks_l2(op, tile, part, ahead + kL2Ahead, ahead + kL2Ahead + 1, count, lane);
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group %0;" ::"n"(kRingStages - 1) : "memory");  // this lane's part of unit i landed
    __syncwarp();                                                               // and every other lane's
    if constexpr (kSlotsByMask) return ring + i % kRingStages * kSlotWords;
    const int slot = read_at;
    refill_at = read_at;
    read_at = read_at == kLastSlot ? 0 : read_at + kSlotWords;
    return ring + slot;
  };
  if constexpr (kPairMode) {
    pair_loop(fetch, xr, chunk_at, count, lane, acc);
    return;
  }
  // Chunk i of the warp: fetch it, multiply. With kXRegs, x_cur holds chunk
  // i's B fragments (loaded during chunk i - 1) and chunk i + 1's go out
  // into x_after now, a whole chunk ahead of their use.
  auto step = [&](int i, const unsigned (&x_cur)[kMTiles][8], unsigned (&x_after)[kMTiles][8]) {
    Chunk c;
    if constexpr (kXInRegs) {
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 8; ++e) c.b[j][e] = x_cur[j][e];
      if (i + 1 < count) load_x_frags(xr, chunk_at(i + 1), x_after);
    }
    read_slot<TX>(fetch(i), 0, lane, c);
    mma_chunk(c, acc);
  };
  // With kXRegs the loop body is two chunks, so the two x buffers swap roles
  // by name: a single-chunk body copied x_after into x_cur every chunk
  // (16 moves at M = 16, of a chunk's ~250 instructions). Otherwise (and
  // in any case not unrolled further: with few chunks per warp a full unroll
  // hoists every load and runs out of registers) one chunk per pass.
  unsigned x_a[kMTiles][8], x_b[kMTiles][8];
  if (kXInRegs && count > 0) load_x_frags(xr, part, x_a);
#pragma unroll 1
  for (int i = 0; i < count; i += kXInRegs ? 2 : 1) {
    step(i, x_a, x_b);
    if (kXInRegs && i + 1 < count) step(i + 1, x_b, x_a);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}


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
