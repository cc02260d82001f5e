// w8a8_gemm for small M (the "stream" family, int8, blocks of 128·j codes):
// at M ≤ 64 the product is a stream of W's N·K bytes past a few rows of x,
// so the kernel is built to read W once at copy speed: straight from global
// memory into mma fragments, no shared memory, split over k between blocks
// so that every SM has bytes in flight.
//
// The k permutation. A block product Σ_k qW[n][k]·qA[m][k] is the same for
// any order of its k, as long as both operands use one order. Lane
// (g, t) = (lane / 4, lane % 4) loads the 32 contiguous bytes [32t, 32t + 32)
// of each 128 codes (a "piece") of W's rows g and g + 8 and of x's row g, and
// k32 step s (0..3) of the piece feeds the tensor cores its words 2s and
// 2s + 1: the fragment slots that m16n8k32 assigns to k 4t..4t+3 and
// 16+4t..16+4t+3 (w8a8_mma.cuh) hold W's and x's codes [32t + 8s, +8). Over
// the 4 lanes of a row and the 4 steps this visits each of the piece's 128
// codes once, for W and x alike, so each step's sums are a permutation of
// the piece's; 4 lanes read a row's whole 128-byte line, one 16-byte load
// for every 16 bytes.
//
// Work: block (blockIdx.x, blockIdx.y) = (band, slice) takes rows
// [band·kBandRows, +kBandRows) of W, each warp kTiles tiles of 16 of them,
// over quantization blocks [slice·kSliceBlocks, +kSliceBlocks). The W pieces
// of kUnroll pieces ahead are in registers (rotating buffers: a loop
// unrolled over one rotation keeps every index a constant); x's codes and
// both sides' block parameters are loaded one piece ahead up to 16 rows of x
// (from L1/L2: every warp of every band reads the same few rows of x). Rows of x past M read
// row M − 1 and rows of W past kN read row kN − 1: valid memory, whose
// products land in columns or rows of y that are never stored.
//
// Promotion: after a block's last piece each int32 sum is added to the
// float accumulators with the block's parameters (w8a8_combine.cuh), as in
// the other families.
//
// Split k (kSplits > 1): each block stores its float sums in the workspace
// and counts them on its band's counter (qjit_pieces.cuh); the block that
// stores the band's last piece sums the kSplits pieces in slice order and
// writes y, so the result does not depend on which block finished first.
//
// Under PDL the first kUnroll pieces of W are requested before waiting for
// the quantization kernel, whose codes and parameters come after the wait.
//
// kFuse (up to 16 rows of x): no quantization kernel. Each block quantizes
// x's rows over its own slice of k into shared memory after the wait (the
// quantizer of w8a8_quant_a.cuh, bit for bit), then reads its codes there:
// the plan is one kernel.
using namespace qjit_spec;
#include "qjit/w8a8_gemm/w8a8_quant_a.cuh"
#include "qjit/w8a8_gemm/w8a8_combine.cuh"
#include "qjit/w8a8_gemm/w8a8_mma.cuh"

static_assert(!kFp8 && kBlock % 128 == 0, "the stream family runs int8 codes in blocks of 128·j (codegen)");
static_assert(kBlocks % kSplits == 0, "a slice is whole quantization blocks (codegen)");
static_assert(kUnroll == 2 || kUnroll == 4, "the rotation alternates x between two buffers");

constexpr int kThreads = 32 * kWarps;
constexpr int kBandRows = 16 * kTiles * kWarps;
constexpr int kBands = (kN + kBandRows - 1) / kBandRows;
constexpr int kPiecesPerBlock = kBlock / 128;
constexpr int kSliceBlocks = kBlocks / kSplits;
constexpr int kSlicePieces = kSliceBlocks * kPiecesPerBlock;
constexpr int kAccWords = kTiles * kMTiles * 4;  // a lane's float sums
// x's codes and parameters one piece ahead in a second buffer for at most two
// tiles of x (16 rows); wider x is loaded just before its piece (L1 hits: the
// block's warps read the same rows), as the registers of two buffers of it
// would cost more than the wait.
constexpr bool kXAhead = kMTiles <= 2;
// Workspace after the quantization's arrays (codegen/ops/w8a8_gemm.cpp): a
// counter per band, then the pieces [slice][band][warp][word][lane].
constexpr int kCounterBytes = (kBands * 4 + 255) / 256 * 256;

// f(i, j, e) for every sum a lane holds: tile i of W, tile j of x, element e.
template <typename F>
__device__ __forceinline__ void each_sum(F&& f) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(i, j, e);
}

// A piece of W in a lane's registers: rows g and g + 8 of each tile, 32 bytes each.
struct WPiece {
  uint4 row[kTiles][2][2];  // [tile][row g, g + 8][bytes 0-15, 16-31]
};
// A piece of x (rows 8j + g), and the parameters of the piece's block.
struct XPiece {
  uint4 row[kMTiles][2];
  W8a8RowParams a[kMTiles][2];  // rows 8j + 2t, 8j + 2t + 1 (the lane's columns of D)
  W8a8ColParams w[kTiles][2];   // rows g, g + 8 of each tile
};

__device__ __forceinline__ unsigned word(const uint4 (&v)[2], int i) {
  const uint4& h = v[i / 4];
  return (i % 4 == 0) ? h.x : (i % 4 == 1) ? h.y : (i % 4 == 2) ? h.z : h.w;
}

// The lane's W rows (clamped to the matrix): row[i][h] = tile i's row g + 8h.
struct WRows {
  const signed char* row[kTiles][2];
  int n[kTiles][2];
};

__device__ __forceinline__ void load_w(const WRows& r, int piece, int t, WPiece& p) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const signed char* at = r.row[i][h] + piece * 128 + 32 * t;
      p.row[i][h][0] = qjit::load_raw16<true>(at);  // read once: not kept in L1
      p.row[i][h][1] = qjit::load_raw16<true>(at + 16);
    }
}

// Where a block reads x's codes and block parameters: the plan's workspace,
// written by the quantization kernel (codes [rows][kK], parameters
// [block][kParamRows]), or with kFuse shared memory the block filled with its
// own slice of k (codes [kXRows][kXStride], parameters [block of the
// slice][kXRows]). Codes of row r and piece p at codes + r·row_stride +
// (p − piece0)·128; parameters at (block − block0)·param_stride + r.
struct XSource {
  const signed char* codes;
  int row_stride, piece0;
  const float *scale, *offset;
  const int* sum;
  int block0, param_stride;
};

// 16 bytes of x's codes: from global memory by the read-only path, from shared memory plainly.
template <bool kShared>
__device__ __forceinline__ uint4 load_codes16(const signed char* p) {
  if constexpr (kShared) return *reinterpret_cast<const uint4*>(p);
  else return qjit::load_raw16<false>(p);
}

// x's codes of the piece and, for its block, x's and W's parameters.
template <bool kShared>
__device__ __forceinline__ void load_x(const XSource& src, const W8a8Operands& op, const WRows& r, int piece, int M,
                                       int g, int t, XPiece& p) {
  const int block = piece / kPiecesPerBlock;
#pragma unroll
  for (int j = 0; j < kMTiles; ++j) {
    const signed char* at = src.codes + static_cast<long long>(min(8 * j + g, M - 1)) * src.row_stride +
                            (piece - src.piece0) * 128 + 32 * t;
    p.row[j][0] = load_codes16<kShared>(at);
    p.row[j][1] = load_codes16<kShared>(at + 16);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int at_param = (block - src.block0) * src.param_stride + min(8 * j + 2 * t + e, M - 1);
      // (ΣA multiplies W's offsets: read where W has them; the quantization writes it for every int8 x.)
      p.a[j][e] = {src.scale[at_param], kOffsetA ? src.offset[at_param] : 0.0f,
                   kOffsetW ? static_cast<float>(src.sum[at_param]) : 0.0f};
    }
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long at = static_cast<long long>(block) * kN + r.n[i][h];
      p.w[i][h] = w8a8_col_params(op.w_scale[at], kOffsetW ? op.w_offset[at] : 0.0f, kOffsetA ? op.w_sum[at] : 0);
    }
}

// The piece's 4 k32 steps into the block's int32 sums.
__device__ __forceinline__ void mma_piece(const WPiece& w, const XPiece& x, int (&sums)[kTiles][kMTiles][4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const unsigned a[4] = {word(w.row[i][0], 2 * s), word(w.row[i][1], 2 * s), word(w.row[i][0], 2 * s + 1),
                             word(w.row[i][1], 2 * s + 1)};
#pragma unroll
      for (int j = 0; j < kMTiles; ++j) mma_k32(sums[i][j], a, word(x.row[j], 2 * s), word(x.row[j], 2 * s + 1));
    }
}

// Sums of a block into the float accumulators, then cleared. D's element e
// of tile i, mtile j is W's row g + 8(e/2) and x's row 8j + 2t + e%2.
__device__ __forceinline__ void promote(const XPiece& x, int (&sums)[kTiles][kMTiles][4],
                                        float (&acc)[kTiles][kMTiles][4]) {
  each_sum([&](int i, int j, int e) {
    acc[i][j][e] = w8a8_add_block(acc[i][j][e], sums[i][j][e], x.a[j][e % 2], x.w[i][e / 2]);
    sums[i][j][e] = 0;
  });
}

// One piece: its products, and the promotion when it ends a block.
__device__ __forceinline__ void step(const WPiece& w, const XPiece& x, int piece, int (&sums)[kTiles][kMTiles][4],
                                     float (&acc)[kTiles][kMTiles][4]) {
  mma_piece(w, x, sums);
  if (piece % kPiecesPerBlock == kPiecesPerBlock - 1) promote(x, sums, acc);
}

// y from the lane's sums (rows of x past M and rows of W past kN are not stored).
__device__ __forceinline__ void store_y(const float (&acc)[kTiles][kMTiles][4], int n0, int M, int g, int t,
                                        const TX* __restrict__ bias, TX* __restrict__ y) {
  each_sum([&](int i, int j, int e) {
    const int n = n0 + 16 * i + 8 * (e / 2) + g, m = 8 * j + 2 * t + e % 2;
    if (n < kN && m < M) y[static_cast<long long>(m) * kN + n] = qjit::from_f32<TX>(w8a8_finish(acc[i][j][e], bias, n));
  });
}

// Split k: this block's sums go to the workspace and are counted on the
// band's counter; the block that stores the band's last piece adds the
// kSplits pieces in slice order (its own from registers) and writes y.
__device__ __forceinline__ void sum_slices_and_store(const float (&acc)[kTiles][kMTiles][4], void* workspace, int band,
                                                     int slice, int warp, int lane, int n0, int M, int g, int t,
                                                     const TX* __restrict__ bias, TX* __restrict__ y) {
  unsigned* counter = static_cast<unsigned*>(workspace) + band;
  float* pieces = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
  const auto piece_at = [&](int s) {
    return pieces + ((static_cast<long long>(s) * kBands + band) * kWarps + warp) * kAccWords * 32;
  };
  float* mine = piece_at(slice);
  each_sum([&](int i, int j, int e) { __stcg(mine + ((i * kMTiles + j) * 4 + e) * 32 + lane, acc[i][j][e]); });
  __shared__ bool last;
  __syncthreads();  // every warp's stores before the count (cumulative release)
  if (threadIdx.x == 0) last = qjit::last_piece(counter, kSplits);
  __syncthreads();  // thread 0's acquire, for every thread's reads
  if (!last) return;
  float sum[kTiles][kMTiles][4];
  each_sum([&](int i, int j, int e) { sum[i][j][e] = 0.0f; });
  for (int s = 0; s < kSplits; ++s) {  // slice order, whichever block is last
    const float* other = piece_at(s);
    each_sum([&](int i, int j, int e) {
      sum[i][j][e] += s == slice ? acc[i][j][e] : __ldcg(other + ((i * kMTiles + j) * 4 + e) * 32 + lane);
    });
  }
  store_y(sum, n0, M, g, t, bias, y);
}

// x's rows a fused block quantizes and holds (the bucket's, at most 16), and
// its shared codes' row stride: the slice's codes and 16 bytes, so that the 8
// lanes of a 16-byte load phase (rows g, g + 1 × t = 0..3) fall in distinct banks.
constexpr int kXRows = 8 * kMTiles;
constexpr int kXStride = kSliceBlocks * kBlock + 16;
static_assert(!kFuse || kMTiles <= 2, "the fused quantization holds at most 16 rows of x (codegen)");

// The block's band and slice: W streamed, x from `src`, y or the split sums
// written. With kFuse the block first quantizes x's rows over its slice of k
// into shared memory (every band's block of the slice does the same work: it
// is M·K / splits values, small beside the block's W).
template <bool kFused>
__device__ __forceinline__ void stream_gemm(const TX* __restrict__ x, const W8a8Operands& op, const TX* __restrict__ bias,
                                            TX* __restrict__ y, int M, void* __restrict__ workspace) {
  qjit::allow_next_grid();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int band = blockIdx.x, slice = blockIdx.y;
  const int first_row = band * kBandRows + warp * 16 * kTiles;  // the warp's first tile
  WRows rows;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows.n[i][h] = min(first_row + 16 * i + 8 * h + g, kN - 1);
      rows.row[i][h] = op.wq + static_cast<long long>(rows.n[i][h]) * kK;
    }
  const int piece0 = slice * kSlicePieces;

  WPiece w[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (u < kSlicePieces) load_w(rows, piece0 + u, t, w[u]);
  qjit::wait_for_previous_grid();  // x (fused), or the quantization kernel's codes and parameters

  XSource src{op.codes, kK, 0, op.a_scale, op.a_offset, op.a_sum, 0, kParamRows};
  if constexpr (kFused) {
    extern __shared__ uint4 stream_smem[];
    signed char* codes = reinterpret_cast<signed char*>(stream_smem);
    float* scale = reinterpret_cast<float*>(codes + kXRows * kXStride);
    float* offset = scale + kSliceBlocks * kXRows;
    int* sum = reinterpret_cast<int*>(offset + kSliceBlocks * kXRows);
    const int block0 = slice * kSliceBlocks;
    for (int item = warp; item < M * kSliceBlocks; item += kWarps) {
      const int row = item / kSliceBlocks, b = item % kSliceBlocks;
      w8a8_quantize_one(x, row, block0 + b, codes + row * kXStride + b * kBlock, scale, offset, sum, b * kXRows + row);
    }
    __syncthreads();
    src = {codes, kXStride, piece0, scale, offset, sum, block0, kXRows};
  }

  XPiece xp[kXAhead ? 2 : 1];
  if constexpr (kXAhead) load_x<kFused>(src, op, rows, piece0, M, g, t, xp[0]);

  int sums[kTiles][kMTiles][4];
  float acc[kTiles][kMTiles][4];
  each_sum([&](int i, int j, int e) { sums[i][j][e] = 0, acc[i][j][e] = 0.0f; });

  // Piece p of the slice uses W buffer p % kUnroll and x buffer p % 2 (kUnroll is even).
#pragma unroll 1
  for (int p0 = 0; p0 < kSlicePieces; p0 += kUnroll) {
#pragma unroll
    for (int b = 0; b < kUnroll; ++b) {
      const int p = p0 + b;
      if (p >= kSlicePieces) break;
      if constexpr (kXAhead) {
        if (p + 1 < kSlicePieces) load_x<kFused>(src, op, rows, piece0 + p + 1, M, g, t, xp[(b + 1) % 2]);
        step(w[b], xp[b % 2], piece0 + p, sums, acc);
      } else {
        load_x<kFused>(src, op, rows, piece0 + p, M, g, t, xp[0]);
        step(w[b], xp[0], piece0 + p, sums, acc);
      }
      if (p + kUnroll < kSlicePieces) load_w(rows, piece0 + p + kUnroll, t, w[b]);
    }
  }

  if constexpr (kSplits == 1) {
    store_y(acc, first_row, M, g, t, bias, y);
  } else {
    sum_slices_and_store(acc, workspace, band, slice, warp, lane, first_row, M, g, t, bias, y);
  }
}

// The plan's second kernel, after the quantization kernel.
extern "C" __global__ void __launch_bounds__(kThreads)
qjit_w8a8_gemm(const signed char* __restrict__ codes, const float* __restrict__ a_scale,
               const float* __restrict__ a_offset, const int* __restrict__ a_sum, const signed char* __restrict__ wq,
               const float* __restrict__ w_scale, const float* __restrict__ w_offset, const int* __restrict__ w_sum,
               const TX* __restrict__ bias, TX* __restrict__ y, int M, void* __restrict__ workspace) {
  if constexpr (!kFuse)
    stream_gemm<false>(nullptr, {codes, a_scale, a_offset, a_sum, wq, w_scale, w_offset, w_sum}, bias, y, M, workspace);
}

// kFuse: the plan's only kernel, x quantized by each block for its slice of k.
extern "C" __global__ void __launch_bounds__(kThreads)
qjit_w8a8_gemm_fused(const TX* __restrict__ x, const signed char* __restrict__ wq, const float* __restrict__ w_scale,
                     const float* __restrict__ w_offset, const int* __restrict__ w_sum, const TX* __restrict__ bias,
                     TX* __restrict__ y, int M, void* __restrict__ workspace) {
  if constexpr (kFuse)
    stream_gemm<true>(x, {nullptr, nullptr, nullptr, nullptr, wq, w_scale, w_offset, w_sum}, bias, y, M, workspace);
}
