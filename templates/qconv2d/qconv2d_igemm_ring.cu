// qconv2d, the pipelined implicit GEMM for fp16 x (family igemm_ring):
//   C[m][n] = Σ_k A[m][k] · B[k][n],  m = output point b·kOh·kOw + oy·kOw + ox,
//   n = output channel, k = (fy·kKw + fx)·kCi + ci (the packed weights' order),
//   A[m][k] = x[b][iy][ix][ci], iy = oy·sh − ph + fy·dh, ix likewise (0 outside),
//   B[k][n] = w[n][fy][fx][ci] = q·s + o.
// In nhwc, y[b][oy][ox][co] is C itself, row-major [kM][kCo].
//
// nchw x (layout=nchw): the gather below needs each input point's channels
// contiguous, so the plan's first step, qjit_qconv2d_to_nhwc, writes x
// transposed to [b][iy][ix][ci] into the workspace, and this kernel reads
// that. It writes y in nchw itself (the epilogue's scalar stores: 8 lanes
// hold 8 consecutive output points of one channel, 16 contiguous bytes).
//
// Chunks: K is cut in chunks of kBK channels of one filter tap (kBK divides
// kCi). A chunk's A tile is, for each of kBM output points, kBK contiguous
// channels of one input point: kBK / 8 pieces of 16 bytes, each one cp.async
// (zero-filled, src-size 0, for a tap in the padding or a row past kM). Its
// B tile is kBN rows of kBK·kBits/8 packed bytes, also 16-byte cp.async
// (zero-filled past kCo).
//
// Ring: kStages slots in dynamic shared memory, slot = [A tile][raw B tile],
// then two buffers of dequantised B (fp16, [kBN][kBK]). Iteration it (chunk
// c0 + it of the block's range):
//   wait until chunk it + 1 has landed (cp.async.wait_group kStages − 3);
//   barrier (everyone's pieces visible; Bh[it % 2] complete; every warp done
//            with iteration it − 1, so its slot and the other Bh are free);
//   queue chunk it + kStages − 1 into the slot of chunk it − 1 (one group,
//            empty past the end: the group count stays uniform);
//   dequantise chunk it + 1's raw B into Bh[(it + 1) % 2];
//   multiply chunk it: A from its slot, B from Bh[it % 2].
// So a chunk's loads have kStages − 2 iterations of mma to land, and the
// dequantisation (ALU) of one chunk overlaps the mma of the previous one.
// Each weight is dequantised once per block: w = fma(q, s, o) in fp32,
// rounded once to fp16 (the tolerance of tuner/reference/qconv2d.h counts
// that rounding); q is made exact in fp32 by the magic-number trick
// (2^23 + u as a float's bits, minus 2^23 + 8), no integer conversion.
//
// Swizzle: A tiles and Bh rows are kBK halves (kP = kBK / 8 pieces of 16
// bytes). Piece p of row r sits at piece p ^ f(r), f(r) = (r / (8 / kP)) % kP:
// the 8 rows an ldmatrix phase reads (8 consecutive rows, one logical piece)
// then hit 8 different 16-byte bank groups (kP = 8: one row per 128 bytes,
// f = r % 8; kP = 4: two rows per 128 bytes, f = (r / 2) % 4 separates the
// four pairs). The raw B rows are read along their bytes (a warp reads
// contiguous 128 or 256 bytes) and need none.
//
// Warps: kWarpsM × kWarpsN over the kBM × kBN tile, each kMI × kNI mma tiles
// (m16n8k16, fp16 × fp16 → fp32). Fragments by ldmatrix.x4:
//   A, mma tile mi: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
//     (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3 of the PTX ISA's
//     m16n8k16 A layout; lane l addresses row l % 16, piece 2·ks + l / 16.
//   B, mma tiles ni, ni + 1: Bh rows are n, so a non-transposed 8×8 matrix
//     of rows n gives lane (g, t) B[k 2t, 2t+1][n g], the b0 layout; matrices
//     (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) =
//     b0, b1 of tile ni and b0, b1 of tile ni + 1; lane l addresses
//     row l % 8 + (l / 16)·8, piece 2·ks + (l / 8) % 2.
//
// Split-K (kSplit > 1, for few output tiles): grid.z = kSplit blocks per
// output tile, block z taking chunks [z·kChunks/kSplit, (z+1)·kChunks/kSplit).
// Each stores its accumulators in the workspace, then counts itself on the
// tile's counter; the last to arrive sums the kSplit pieces in the order
// z = 0, 1, ... (its own included), whatever the arrival order, so the
// result is deterministic, runs the epilogue and resets the counter to 0
// for the next launch (which starts after this grid ends).
// Workspace (runtime-owned, zeroed when allocated): kCounterBytes of
// counters, one per output tile; then kBM·kBN floats per block, [warp][mi][ni][r][lane].
//
// wgmma (kWgmma, sm_90a): the same ring, slots and dequantisation, the
// multiply on Hopper's warpgroup instruction instead of ldmatrix + mma.sync.
// With kBK = 64 a staged row is 128 bytes and the swizzle above is f(r) =
// r % 8: exactly wgmma's canonical K-major layout with the 128-byte swizzle
// (qjit_sm90.cuh), once the ring starts on a 1024-byte boundary (the host
// adds 1024 bytes). So A (the slot's x tile, rows = output points) and B (Bh
// or the predeq slot's tile, rows = output channels) are read in place by
// descriptors. Warpgroup g multiplies rows 64g .. 64g + 63 of the block tile
// by all kBN columns: one wgmma.m64n<kBN>k16 per 16 k, four per chunk. Its
// accumulators are mma.m16n8's, tile by tile (qjit_wgmma.cuh's layout), so
// warp w is the ldmatrix kernel's warp (wm = w, wn = 0) of a 16 × kBN tile,
// and the epilogue and split-k pieces are unchanged. Per iteration: wait and
// barrier as above (with fence.proxy.async first: the cp.async and dequant
// writes are generic-proxy stores that wgmma reads through the async proxy),
// queue the refill, issue chunk it's four wgmma, dequantise chunk it + 1
// while they run, then wgmma.wait_group 0 (the next iteration refills this
// chunk's slot and dequantises into its Bh). The trip count is a constant
// (kChunks % kSplit == 0): ptxas serialises wgmma behind a branch.
#include "qjit/qconv2d/qconv2d_common.cuh"

static_assert(sizeof(TX) == 2, "the tensor-core kernel reads fp16 x");
static_assert(kBK == 32 || kBK == 64, "a chunk is 4 or 8 pieces of 16 bytes");
static_assert(kCi % kBK == 0, "a chunk lies inside one filter tap");
static_assert(kStages >= 3, "the ring holds the chunk multiplied, the one dequantised and one in flight");

using qjit::half_t;

constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kM = kBatch * kOutPoints;
constexpr int kWTM = kBM / kWarpsM, kWTN = kBN / kWarpsN;
constexpr int kMI = kWTM / 16, kNI = kWTN / 8;
static_assert(kWTM % 16 == 0 && kWTN % 16 == 0, "a warp's tile is whole m16 rows and pairs of n8 tiles");
constexpr int kP = kBK / 8;                   // 16-byte pieces of a staged row of halves
constexpr int kChunks = kK / kBK;             // chunks of the whole depth
constexpr int kCiChunks = kCi / kBK;          // chunks of one filter tap
constexpr int kABytes = kBM * kBK * 2;        // A tile of a slot
constexpr int kBRowBytes = kBK * kBits / 8;   // packed bytes of one output channel in a chunk
constexpr int kBRowPieces = kBRowBytes / 16;
constexpr int kBRawBytes = kBN * kBRowBytes;  // raw B tile of a slot
constexpr int kBhBytes = kBN * kBK * 2;       // one dequantised B buffer
// kPreDequant: a slot holds the fp16 B tile itself, copied from the weights
// dequantised by the plan's step before (qjit_qconv2d_dequant_w).
constexpr int kSlotBytes = kABytes + (kPreDequant ? kBhBytes : kBRawBytes);
static_assert(kBRowBytes % 16 == 0, "a packed chunk row is whole 16-byte pieces");
constexpr int kAItems = kBM * kP / kThreads;  // A pieces per thread per chunk
static_assert(kAItems * kThreads == kBM * kP, "the threads split the A tile evenly");
constexpr int kBPieces = kBN * kBRowPieces;
constexpr int kBItems = (kBPieces + kThreads - 1) / kThreads;
constexpr int kDqItems = (kBN * kP + kThreads - 1) / kThreads;  // 8-weight items dequantised per thread
constexpr int kTilesM = (kM + kBM - 1) / kBM, kTilesN = (kCo + kBN - 1) / kBN;
constexpr int kCounterBytes = (kTilesM * kTilesN * 4 + 255) / 256 * 256;  // codegen/ops/qconv2d.cpp's workspace
static_assert(kSplit >= 1 && kSplit <= kChunks, "every split has a chunk");
static_assert(!kWgmma || (kBK == 64 && kWarpsN == 1 && kWarpsM * 16 == kBM && kBM % 64 == 0 &&
                          (kBN == 64 || kBN == 128 || kBN == 256) && kChunks % kSplit == 0),
              "the wgmma ring: 128-byte rows, a warpgroup per 64 rows by every column, equal splits");
constexpr int kIters = kChunks / kSplit;  // (kWgmma) every block's chunks
constexpr int kLag = kInflight ? 1 : 0;    // (kWgmma) chunks whose wgmma may still run at an iteration's end
constexpr int kBhBuffers = 2 + kLag;       // dequantised B tiles
static_assert(!kInflight || (kWgmma && kStages >= 4), "a chunk in flight: the wgmma ring with 4 or more slots");

// Half offset of piece p of staged row r (see the swizzle above).
__device__ __forceinline__ int swizzled(int r, int p) { return r * kBK + ((p ^ ((r / (8 / kP)) % kP)) * 8); }

using qjit::ldmatrix_x4;
using qjit::smem_address;

using qjit::cp_async16;


// The thread's A pieces: where each one's output point reads x at tap (0, 0).
// off: x offset of input point (b, iy0, ix0), channel of the piece (iy0, ix0
// may be outside the input: a tap adds its own offset before the check);
// a row past kM gets iy0 far below 0, so every tap of it reads zeros.
struct ARows {
  int off[kAItems], iy0[kAItems], ix0[kAItems];
};

__device__ __forceinline__ void a_rows(int m0, ARows& a) {
#pragma unroll
  for (int i = 0; i < kAItems; ++i) {
    const int e = threadIdx.x + i * kThreads, m = m0 + e / kP, piece = e % kP;
    if (m < kM) {
      const int b = m / kOutPoints, r = m % kOutPoints;
      a.iy0[i] = r / kOw * kStrideH - kPadH;
      a.ix0[i] = r % kOw * kStrideW - kPadW;
      a.off[i] = ((b * kH + a.iy0[i]) * kW + a.ix0[i]) * kCi + piece * 8;
    } else {
      a.iy0[i] = -(1 << 24), a.ix0[i] = 0, a.off[i] = 0;
    }
  }
}

// Queues chunk `chunk` (A and raw B) into `slot`, then commits a group
// (empty if the chunk is past `end`).
__device__ __forceinline__ void queue_chunk(const half_t* __restrict__ x, const unsigned char* __restrict__ qweight,
                                            const ARows& a, int n0, int chunk, int end, char* slot) {
  if (chunk < end) {
    const int tap = chunk / kCiChunks, c0 = chunk % kCiChunks * kBK;
    const int dy = tap / kKw * kDilH, dx = tap % kKw * kDilW;
    const int shift = (dy * kW + dx) * kCi + c0;
    unsigned short* as = reinterpret_cast<unsigned short*>(slot);
#pragma unroll
    for (int i = 0; i < kAItems; ++i) {
      const int e = threadIdx.x + i * kThreads;
      const int iy = a.iy0[i] + dy, ix = a.ix0[i] + dx;
      const bool in = static_cast<unsigned>(iy) < static_cast<unsigned>(kH) &&
                      static_cast<unsigned>(ix) < static_cast<unsigned>(kW);
      cp_async16(as + swizzled(e / kP, e % kP), in ? x + (a.off[i] + shift) : x, in ? 16 : 0);
    }
    char* bs = slot + kABytes;
    if constexpr (kPreDequant) {
      // qweight is the fp16 weights [kCo][kK]: kBN rows of kBK halves, swizzled as the dequantised tiles.
      constexpr int kPieces = kBN * kP;
#pragma unroll
      for (int i = 0; i < (kPieces + kThreads - 1) / kThreads; ++i) {
        const int u = threadIdx.x + i * kThreads;
        if (kPieces % kThreads != 0 && u >= kPieces) break;
        const int n = u / kP, p = u % kP;
        const bool live = n0 + n < kCo;
        const unsigned char* src = qweight + (static_cast<long long>(n0 + n) * kK + chunk * kBK + p * 8) * 2;
        cp_async16(reinterpret_cast<unsigned short*>(bs) + swizzled(n, p), live ? src : qweight, live ? 16 : 0);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
      return;
    }
#pragma unroll
    for (int i = 0; i < kBItems; ++i) {
      const int u = threadIdx.x + i * kThreads;
      if (kBPieces % kThreads != 0 && u >= kBPieces) break;
      const int n = u / kBRowPieces, q = u % kBRowPieces;
      const bool live = n0 + n < kCo;
      const unsigned char* src =
          qweight + static_cast<long long>(n0 + n) * kRowBytes + static_cast<long long>(chunk) * kBRowBytes + q * 16;
      cp_async16(bs + u * 16, live ? src : qweight, live ? 16 : 0);
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Code j (0..7) of an 8-weight item as an exact fp32: int4 from word w
// (byte j/2, channel 2i in the high nibble), int8 from byte j of (w0, w1).
__device__ __forceinline__ float code_f32(unsigned w0, unsigned w1, int j) {
  if constexpr (kBits == 4) {
    const unsigned nib = (w0 >> (8 * (j / 2) + (j % 2 ? 0 : 4))) & 15u;  // code + 8
    return __int_as_float(0x4B000000 | nib) - 8388616.0f;              // (2^23 + nib) − (2^23 + 8)
  } else {
    const unsigned byte = ((j < 4 ? w0 : w1) >> (8 * (j % 4))) & 255u;
    return __int_as_float(0x4B000000 | (byte ^ 128u)) - 8388736.0f;  // (2^23 + q + 128) − (2^23 + 128)
  }
}

// w = q·s + o with one fused rounding (qconv2d_common.cuh's dequant, q already fp32).
__device__ __forceinline__ float dequant_f(float q, float s, float o) { return fmaf(q, s, o); }

// 8 weights of output channel co from input channel c (one tap): their
// kBits-wide codes at `raw`, dequantised with their blocks' (scale, offset),
// as 4 words of two fp16 each.
__device__ __forceinline__ uint4 dequant8(const unsigned char* raw, int co, int c, const float* __restrict__ scales,
                                          const float* __restrict__ offsets) {
  unsigned w0, w1 = 0;
  if constexpr (kBits == 4) {
    w0 = *reinterpret_cast<const unsigned*>(raw);
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(raw);
    w0 = v.x, w1 = v.y;
  }
  const float* sp = scales + co * kGroups;
  const float* op = offsets + co * kGroups;
  unsigned h[4];
  if constexpr (kBlock % 8 == 0) {
    // The 8 channels share one (scale, offset).
    const float s = __ldg(sp + c / kBlock), o = __ldg(op + c / kBlock);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      h[k] = pack_half2(dequant_f(code_f32(w0, w1, 2 * k), s, o), dequant_f(code_f32(w0, w1, 2 * k + 1), s, o));
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int ga = (c + 2 * k) / kBlock, gb = (c + 2 * k + 1) / kBlock;
      h[k] = pack_half2(dequant_f(code_f32(w0, w1, 2 * k), __ldg(sp + ga), __ldg(op + ga)),
                        dequant_f(code_f32(w0, w1, 2 * k + 1), __ldg(sp + gb), __ldg(op + gb)));
    }
  }
  return make_uint4(h[0], h[1], h[2], h[3]);
}

// Dequantises the raw B tile of `slot` (chunk `chunk`) into bh ([kBN][kBK]
// halves, swizzled). Item j: output channel n = j / kP, 8 channels from
// c0 + (j % kP)·8; its raw bytes are kBits at n·kBRowBytes + (j % kP)·kBits.
__device__ __forceinline__ void dequant_chunk(const char* slot, int chunk, int n0, const float* __restrict__ scales,
                                              const float* __restrict__ offsets, unsigned short* bh) {
  const unsigned char* raw = reinterpret_cast<const unsigned char*>(slot + kABytes);
  const int c0 = chunk % kCiChunks * kBK;
#pragma unroll
  for (int i = 0; i < kDqItems; ++i) {
    const int j = threadIdx.x + i * kThreads;
    if ((kBN * kP) % kThreads != 0 && j >= kBN * kP) break;
    const int n = j / kP, p = j % kP, co = n0 + n, c = c0 + p * 8;
    const uint4 h = co < kCo ? dequant8(raw + n * kBRowBytes + p * kBits, co, c, scales, offsets)
                             : make_uint4(0, 0, 0, 0);  // a column past kCo: zeros (its sums are never stored)
    *reinterpret_cast<uint4*>(bh + swizzled(n, p)) = h;
  }
}

// kPreDequant's first step (after nchw x's transpose): every weight
// dequantised once per call, w[co][k] = fp16(q·s + o) exactly as
// dequant_chunk rounds it, into the workspace, which the ring then copies
// tile by tile. One thread per 8 weights (kCi % 32 == 0: they share a tap).
extern "C" __global__ void __launch_bounds__(256)
qjit_qconv2d_dequant_w(const unsigned char* __restrict__ qweight, const float* __restrict__ scales,
                       const float* __restrict__ offsets, half_t* __restrict__ wh) {
  const long long item = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (item >= static_cast<long long>(kCo) * (kK / 8)) return;
  const int co = static_cast<int>(item / (kK / 8)), k = static_cast<int>(item % (kK / 8)) * 8;
  const uint4 h = dequant8(qweight + static_cast<long long>(co) * kRowBytes + k * kBits / 8, co, k % kCi, scales, offsets);
  *reinterpret_cast<uint4*>(wh + static_cast<long long>(co) * kK + k) = h;
}

// acc += the warp's part of one chunk: A from `as`, B from `bh`.
__device__ __forceinline__ void multiply(const unsigned short* as, const unsigned short* bh, int wm, int wn, int lane,
                                         float (&acc)[kMI][kNI][4]) {
#pragma unroll
  for (int ks = 0; ks < kBK / 16; ++ks) {
    unsigned a[kMI][4], b[kNI][2];
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) ldmatrix_x4(a[mi], as + swizzled(wm * kWTM + mi * 16 + lane % 16, 2 * ks + lane / 16));
#pragma unroll
    for (int nj = 0; nj < kNI / 2; ++nj) {
      unsigned r[4];
      ldmatrix_x4(r, bh + swizzled(wn * kWTN + nj * 16 + (lane / 16) * 8 + lane % 8, 2 * ks + (lane / 8) % 2));
      b[2 * nj][0] = r[0], b[2 * nj][1] = r[1], b[2 * nj + 1][0] = r[2], b[2 * nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
        qjit::mma_16816<half_t>(acc[mi][ni], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[ni][0], b[ni][1]);
  }
}

// kWgmma: issues chunk `as` × `bh`'s four wgmma steps into d, one commit
// group. d[4·ni + r] is the ldmatrix kernel's acc[0][ni][r].
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int kStep = 0>
__device__ __forceinline__ void wgmma_steps(unsigned a_lo, unsigned b_lo, float (&d)[kBN / 2]) {
  qjit::wgmma_k16<false, kBN>(d, qjit::descriptor_at<32 * kStep>(a_lo), qjit::descriptor_at<32 * kStep>(b_lo), 1);
  if constexpr (kStep + 1 < kBK / 16) wgmma_steps<kStep + 1>(a_lo, b_lo, d);
}
__device__ __forceinline__ void multiply_wgmma(const unsigned short* as, const unsigned short* bh, int warp,
                                               float (&d)[kBN / 2]) {
  const auto* a = reinterpret_cast<const unsigned char*>(as) + warp / 4 * 64 * 128;  // the warpgroup's 64 rows
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  wgmma_steps(qjit::smem_descriptor_lo(a), qjit::smem_descriptor_lo(reinterpret_cast<const unsigned char*>(bh)), d);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most kPending of this warpgroup's commit groups are in
// flight. The accumulators are fenced only at 0: a read of them while a
// wgmma writing them is in flight would make ptxas wait for it there.
template <int kPending>
__device__ __forceinline__ void wgmma_wait(float (&d)[kBN / 2]) {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
  if constexpr (kPending == 0) qjit::fence_accumulators(d);
}
#else
static_assert(!kWgmma, "the wgmma ring compiles for sm_90a only");
__device__ __forceinline__ void multiply_wgmma(const unsigned short*, const unsigned short*, int, float (&)[kBN / 2]) {}
template <int kPending>
__device__ __forceinline__ void wgmma_wait(float (&)[kBN / 2]) {}
#endif

// Everyone's cp.async pieces (waited for) and dequantised stores made
// visible to wgmma's reads through the async proxy; then the block barrier.
__device__ __forceinline__ void ring_barrier() {
  if constexpr (kWgmma) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
}

// bias, clamp, y. Accumulator r of lane (g, t) in mma tile (mi, ni): row
// g (+8 for r ≥ 2), column 2t (+1 for odd r); y is [kM][kCo], so r = 0, 1
// are two adjacent halves (one 4-byte store when kCo is even).
__device__ __forceinline__ void epilogue(half_t* __restrict__ y, const float* __restrict__ bias, int m0, int n0,
                                         int wm, int wn, int lane, const float (&acc)[kMI][kNI][4]) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int ni = 0; ni < kNI; ++ni) {
    const int n = n0 + wn * kWTN + ni * 8 + 2 * t;
    if (n >= kCo) continue;
    float b0 = 0.0f, b1 = 0.0f;
    if constexpr (kHasBias) b0 = __ldg(bias + n), b1 = n + 1 < kCo ? __ldg(bias + n + 1) : 0.0f;
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm * kWTM + mi * 16 + g + 8 * h;
        if (m >= kM) continue;
        float v0 = acc[mi][ni][2 * h] + b0, v1 = acc[mi][ni][2 * h + 1] + b1;
        if constexpr (kAct >= 1) v0 = fmaxf(v0, 0.0f), v1 = fmaxf(v1, 0.0f);
        if constexpr (kAct == 2) v0 = fminf(v0, 6.0f), v1 = fminf(v1, 6.0f);
        if constexpr (!kNhwc) {
          // y[b][co][point]: the two channels are kOutPoints apart.
          unsigned short* at = reinterpret_cast<unsigned short*>(y) +
                               (static_cast<long long>(m / kOutPoints) * kCo + n) * kOutPoints + m % kOutPoints;
          at[0] = qjit::from_f32<half_t>(v0).bits;
          if (n + 1 < kCo) at[kOutPoints] = qjit::from_f32<half_t>(v1).bits;
          continue;
        }
        unsigned short* row = reinterpret_cast<unsigned short*>(y) + static_cast<long long>(m) * kCo;
        if constexpr (kCo % 2 == 0) {
          *reinterpret_cast<unsigned*>(row + n) = pack_half2(v0, v1);
        } else {
          row[n] = qjit::from_f32<half_t>(v0).bits;
          if (n + 1 < kCo) row[n + 1] = qjit::from_f32<half_t>(v1).bits;
        }
      }
  }
}

// nchw x → nhwc in the workspace (the plan's first step for layout=nchw):
// xt[b][p][c] = x[b][c][p], p the input point iy·kW + ix. Block (p tile, c
// tile, b) moves a 32 × 32 tile through shared memory, 32 × 8 threads: each
// warp reads 32 consecutive points of one channel and writes 32 consecutive
// channels of one point (64 bytes each way). Rows of 33 halves: the 32
// halves of a column, 33 halves apart, fall in 32 different 4-byte banks.
constexpr int kPoints = kH * kW;
extern "C" __global__ void __launch_bounds__(256)
qjit_qconv2d_to_nhwc(const half_t* __restrict__ x, half_t* __restrict__ xt) {
  __shared__ unsigned short tile[32][33];
  const int p0 = blockIdx.x * 32, c0 = blockIdx.y * 32, b = blockIdx.z;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const unsigned short* in = reinterpret_cast<const unsigned short*>(x) + static_cast<long long>(b) * kCi * kPoints;
  unsigned short* out = reinterpret_cast<unsigned short*>(xt) + static_cast<long long>(b) * kPoints * kCi;
#pragma unroll
  for (int r = ty; r < 32; r += 8)
    if (c0 + r < kCi && p0 + tx < kPoints) tile[r][tx] = in[static_cast<long long>(c0 + r) * kPoints + p0 + tx];
  __syncthreads();
#pragma unroll
  for (int r = ty; r < 32; r += 8)
    if (p0 + r < kPoints && c0 + tx < kCi) out[static_cast<long long>(p0 + r) * kCi + c0 + tx] = tile[tx][r];
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_qconv2d_igemm_ring(const half_t* __restrict__ x, const unsigned char* __restrict__ qweight,
                        const float* __restrict__ scales, const float* __restrict__ offsets,
                        const float* __restrict__ bias, half_t* __restrict__ y, void* __restrict__ workspace) {
  extern __shared__ uint4 smem[];
  char* ring = reinterpret_cast<char*>(smem);  // kStages slots
  // (wgmma: from the first 1024-byte boundary, the swizzle atoms' alignment)
  if constexpr (kWgmma) ring += (1024 - smem_address(ring) % 1024) % 1024;
  unsigned short* bh = reinterpret_cast<unsigned short*>(ring + kStages * kSlotBytes);  // [kBhBuffers][kBN][kBK]
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp % kWarpsM, wn = warp / kWarpsM;
  const int first = static_cast<int>(static_cast<long long>(blockIdx.z) * kChunks / kSplit);
  const int end = static_cast<int>(static_cast<long long>(blockIdx.z + 1) * kChunks / kSplit);
  const int iters = end - first;

  ARows arows;
  a_rows(m0, arows);
  float acc[kMI][kNI][4] = {};

  // Prologue: chunks 0 .. kStages − 2 − kLag of the range, group s = chunk s.
#pragma unroll
  for (int s = 0; s < kStages - 1 - kLag; ++s) queue_chunk(x, qweight, arows, n0, first + s, end, ring + s * kSlotBytes);
  if constexpr (kWgmma) {
    // kLag (kInflight): chunk it's wgmma issued, chunk it − 1's waited for, so the tensor cores run
    // across the barrier. Then a slot (and Bh) is free only two iterations after its chunk: the barrier
    // of iteration it follows every warpgroup's wait for chunk it − 2. The refill lands kStages − 2 − kLag
    // chunks ahead, and Bh has kBhBuffers (3 with the lag) buffers.
    float d[kBN / 2] = {};
    if constexpr (kPreDequant) {
#pragma unroll 1
      for (int it = 0; it < kIters; ++it) {
        asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2 - kLag) : "memory");
        ring_barrier();  // chunk it visible to wgmma; every warpgroup's wgmma of chunk it − 1 − kLag done
        const char* slot = ring + it % kStages * kSlotBytes;
        multiply_wgmma(reinterpret_cast<const unsigned short*>(slot),
                       reinterpret_cast<const unsigned short*>(slot + kABytes), warp, d);
        queue_chunk(x, qweight, arows, n0, first + it + kStages - 1 - kLag, end,
                    ring + (it + kStages - 1 - kLag) % kStages * kSlotBytes);
        wgmma_wait<kLag>(d);
      }
    } else {
      asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2 - kLag) : "memory");
      __syncthreads();
      dequant_chunk(ring, first, n0, scales, offsets, bh);
#pragma unroll 1
      for (int it = 0; it < kIters; ++it) {
        asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 3 - kLag) : "memory");
        ring_barrier();  // chunk it's A and Bh visible to wgmma; chunk it − 1 − kLag's slot and Bh free
        queue_chunk(x, qweight, arows, n0, first + it + kStages - 1 - kLag, end,
                    ring + (it + kStages - 1 - kLag) % kStages * kSlotBytes);
        multiply_wgmma(reinterpret_cast<const unsigned short*>(ring + it % kStages * kSlotBytes),
                       bh + it % kBhBuffers * (kBhBytes / 2), warp, d);
        if (it + 1 < kIters)
          dequant_chunk(ring + (it + 1) % kStages * kSlotBytes, first + it + 1, n0, scales, offsets,
                        bh + (it + 1) % kBhBuffers * (kBhBytes / 2));
        wgmma_wait<kLag>(d);
      }
    }
    wgmma_wait<0>(d);
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[0][ni][r] = d[4 * ni + r];
  }
  if constexpr (!kWgmma && kPreDequant) {
    // Both tiles come copied: wait for chunk it itself, then refill the slot chunk it − 1 used.
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
      asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
      __syncthreads();  // everyone's pieces of chunk it visible; everyone done with chunk it − 1's slot
      queue_chunk(x, qweight, arows, n0, first + it + kStages - 1, end,
                  ring + (it + kStages - 1) % kStages * kSlotBytes);
      const char* slot = ring + it % kStages * kSlotBytes;
      multiply(reinterpret_cast<const unsigned short*>(slot), reinterpret_cast<const unsigned short*>(slot + kABytes),
               wm, wn, lane, acc);
    }
  }
  if constexpr (!kWgmma && !kPreDequant) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
    __syncthreads();
    dequant_chunk(ring, first, n0, scales, offsets, bh);

  #pragma unroll 1
    for (int it = 0; it < iters; ++it) {
      // Groups committed: kStages − 1 + it; chunk it + 1 is group it + 1.
      asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 3) : "memory");
      __syncthreads();
      queue_chunk(x, qweight, arows, n0, first + it + kStages - 1, end, ring + (it + kStages - 1) % kStages * kSlotBytes);
      if (it + 1 < iters)
        dequant_chunk(ring + (it + 1) % kStages * kSlotBytes, first + it + 1, n0, scales, offsets,
                      bh + (it + 1) % 2 * (kBhBytes / 2));
      multiply(reinterpret_cast<const unsigned short*>(ring + it % kStages * kSlotBytes), bh + it % 2 * (kBhBytes / 2),
               wm, wn, lane, acc);
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");

  if constexpr (kSplit > 1) {
    // This block's piece, lane-fastest (coalesced), then the tile's counter.
    const int tile = blockIdx.y * kTilesM + blockIdx.x;
    constexpr int kPiece = kBM * kBN;  // floats
    float* pieces = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
    const auto at = [&](int z, int mi, int ni, int r) {
      return pieces + (static_cast<long long>(z) * kTilesM * kTilesN + tile) * kPiece +
             (((warp * kMI + mi) * kNI + ni) * 4 + r) * 32 + lane;
    };
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) __stcg(at(blockIdx.z, mi, ni, r), acc[mi][ni][r]);
    // Every thread's stores before the count (a cumulative release), the count's acquire passed on by the
    // second barrier (qjit_pieces.cuh); the counter is back at 0 for the next launch.
    __syncthreads();
    __shared__ bool last;
    if (threadIdx.x == 0) last = qjit::last_piece(static_cast<unsigned*>(workspace) + tile, kSplit);
    __syncthreads();
    if (!last) return;
    float sum[kMI][kNI][4] = {};
    // Its own piece too from the workspace (this thread stored it): the
    // accumulators are dead by now, which keeps the registers of one tile.
    for (int z = 0; z < kSplit; ++z)
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
          for (int r = 0; r < 4; ++r) sum[mi][ni][r] += __ldcg(at(z, mi, ni, r));
    epilogue(y, bias, m0, n0, wm, wn, lane, sum);
  } else {
    epilogue(y, bias, m0, n0, wm, wn, lane, acc);
  }
}
