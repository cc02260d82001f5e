// wq_gemm on the tensor cores: Y[m][n] = clamp(Σ_k x[m][k]·w[k][n] + bias[n]),
// w dequantised in registers from qjit's native layout, never written out.
//
// W is the A operand of mma.m16n8k16 (16 rows of n × 16 of k), x the B operand
// (16 of k × 8 rows of x), so even M = 1 fills a tile's rows with weights and
// only the 8 columns of B are partly idle: reading W, not multiplying, is the
// cost at small M. The native layout (tuner/reference/wq_gemm.h) stores, for
// each tile of 16 rows × 64 k, each lane's A fragments of the 4 mma steps as
// kBits words: lane (gq, t) of register R = 4s + r holds rows gq + 8(r%2) and
// physical k = 16t + 4s + 2(r/2) + {0, 1}. B takes the same order: x[m][16t ..
// 16t+16) is the lane's 16 values, register pair (2s, 2s+1) its step s.
//
// Dequantisation (fp16 scales): (word >> b·i) & mask puts a register's two
// quantised values in the two 16-bit halves; OR 0x6400 makes the fp16 numbers
// 1024 + q exactly; subtracting 1024 + z (exact: small integers) and one mul.rn
// by the scale rounds once, as the reference's w rounded to fp16. bf16 scales
// go through fp32 (bf16 has too few bits for 128 + q when q needs 8 bits).
//
// Work split: a block has kWarps / kSplitK row groups of kTiles tiles; the
// kSplitK warps of a group take every kSplitK-th chunk of 64 k and add their
// accumulators through shared memory. blockIdx.y passes over 8·kMTiles rows of
// x at a time (looping when M exceeds the grid, the m = 1024 bucket). Loads
// are software-pipelined one group of kUnroll chunks ahead.

using namespace qjit_spec;

constexpr int kThreads = kWarps * 32;
constexpr int kGroupsPerBlock = kWarps / kSplitK;
constexpr int kChunks = kK / 64;
constexpr int kNTiles = kN / 16;
constexpr int kMBlock = 8 * kMTiles;
constexpr int kMid = 1 << (kBits - 1);
constexpr int kVec = kBits % 4 == 0 ? 4 : kBits == 2 ? 2 : 1;  // words per load
constexpr bool kHalf = !qjit::IsBf16<TS>::value;
static_assert(kWarps % kSplitK == 0, "kSplitK must divide kWarps");
static_assert(kK % 64 == 0 && kN % 16 == 0, "native tiles are 16 x 64");
static_assert(kMBlock <= (kBucketM < 8 ? 8 : kBucketM), "a pass covers at most the bucket's rows");

// --- loads ---------------------------------------------------------------

// The lane's kBits words of one tile, in kBits / kVec vector loads read once
// (L1::no_allocate: weights are streamed, L1 is left to x).
__device__ __forceinline__ void load_tile(const unsigned* __restrict__ tile, int lane, unsigned (&w)[kBits]) {
#pragma unroll
  for (int v = 0; v < kBits / kVec; ++v) {
    const unsigned* p = tile + (v * 32 + lane) * kVec;
    if constexpr (kVec == 4) {
      const uint4 r = qjit::load_raw16<true>(p);
      w[4 * v] = r.x, w[4 * v + 1] = r.y, w[4 * v + 2] = r.z, w[4 * v + 3] = r.w;
    } else if constexpr (kVec == 2) {
      uint2 r;
      asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
      w[2 * v] = r.x, w[2 * v + 1] = r.y;
    } else {
      asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(w[v]) : "l"(p));
    }
  }
}

// Two 16-bit values in mma input type TS, from two floats (lo in the low half).
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  unsigned r;
  if constexpr (kHalf) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

template <typename T> __device__ __forceinline__ float widen16(unsigned short bits);
template <> __device__ __forceinline__ float widen16<qjit::half_t>(unsigned short b) { return qjit::to_f32(qjit::half_t{b}); }
template <> __device__ __forceinline__ float widen16<qjit::bf16_t>(unsigned short b) { return qjit::to_f32(qjit::bf16_t{b}); }

// B fragments of one 8-row tile of x for a chunk: x[m][k0 .. k0+16) as 8 words
// of two TS values (zero for rows m >= M).
template <typename T>
__device__ __forceinline__ void load_x(const T* __restrict__ x, int m, int M, int k0, unsigned (&b)[8]) {
  if (m >= M) {
#pragma unroll
    for (int i = 0; i < 8; ++i) b[i] = 0;
    return;
  }
  const T* p = x + static_cast<long long>(m) * kK + k0;
  if constexpr (sizeof(T) == 4) {
    float f[16];
    qjit::load_f32<float, 16, false>(p, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) b[i] = pack2(f[2 * i], f[2 * i + 1]);
  } else {
    const uint4 lo = qjit::load_raw16<false>(p), hi = qjit::load_raw16<false>(p + 8);
    const unsigned raw[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    constexpr bool kSame = qjit::IsBf16<T>::value == qjit::IsBf16<TS>::value;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if constexpr (kSame) b[i] = raw[i];
      else b[i] = pack2(widen16<T>(raw[i] & 0xffffu), widen16<T>(raw[i] >> 16));
    }
  }
}

// --- dequantisation ----------------------------------------------------------

// Register R's two quantised values, lo in bits 0..15 and hi in bits 16..31
// (field rules in tuner/reference/wq_gemm.h).
// R is a constant once the callers' loops are unrolled.
__device__ __forceinline__ unsigned fields(const unsigned (&w)[kBits], int R) {
  if constexpr (kBits == 3) {
    const unsigned lo2 = (w[R / 8] >> (2 * (R % 8))) & 0x00030003u;
    const unsigned bit2 = (w[2] >> R) & 0x00010001u;
    return lo2 | (bit2 << 2);
  } else {
    constexpr int kPer = 16 / (kBits == 3 ? 2 : kBits);
    constexpr unsigned kMask = ((1u << kBits) - 1) * 0x00010001u;
    return (w[R / kPer] >> (kBits * (R % kPer))) & kMask;
  }
}

// Per-row dequantisation parameters of one chunk, prepared once per chunk.
//   fp16: zq = half2(1024 + zero) (zero = z or 2^(b-1)), s2 = half2(s), o2 = half2(o)
//   bf16: fp32 zero, scale, offset
struct RowParams {
  unsigned zq, s2, o2;
  float zf, sf, of;
};

// Raw per-row quantisation parameters of a chunk, as loaded: the scale's
// bits and the zero byte or the offset's bits (unused by sym).
struct RowRaw {
  unsigned short s, zo;
};

__device__ __forceinline__ RowRaw load_row(const TS* __restrict__ scales, const void* __restrict__ zeros, int group,
                                           int n) {
  const long long at = static_cast<long long>(group) * kN + n;
  RowRaw r{__ldg(reinterpret_cast<const unsigned short*>(scales) + at), 0};
  if constexpr (kZeroMode == 1) r.zo = __ldg(static_cast<const unsigned char*>(zeros) + at);
  if constexpr (kZeroMode == 2) r.zo = __ldg(static_cast<const unsigned short*>(zeros) + at);
  return r;
}

__device__ __forceinline__ RowParams row_params(RowRaw r) {
  RowParams p;
  const int zero = kZeroMode == 1 ? r.zo : kMid;
  const unsigned short o = kZeroMode == 2 ? r.zo : 0;
  if constexpr (kHalf) {
    p.zq = (0x6400u | zero) * 0x00010001u;  // fp16 1024 + zero in both halves
    p.s2 = r.s * 0x00010001u;
    p.o2 = o * 0x00010001u;
  } else {
    p.zf = static_cast<float>(zero);
    p.sf = widen16<TS>(r.s);
    p.of = widen16<TS>(o);
  }
  return p;
}

// One A register: the two weights of fields f with row parameters p.
__device__ __forceinline__ unsigned dequant2(unsigned f, const RowParams& p) {
  if constexpr (kHalf) {
    unsigned d, w;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(f | 0x64006400u), "r"(p.zq));  // q - zero, exact
    if constexpr (kZeroMode == 2) asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(w) : "r"(d), "r"(p.s2), "r"(p.o2));
    else asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(w) : "r"(d), "r"(p.s2));
    return w;
  } else {
    // 2^23 + q as fp32 bits, minus 2^23: exact int -> float for q < 2^16.
    const float lo = __uint_as_float(0x4b000000u | (f & 0xffffu)) - 8388608.0f;
    const float hi = __uint_as_float(0x4b000000u | (f >> 16)) - 8388608.0f;
    if constexpr (kZeroMode == 2) return pack2(fmaf(lo - p.zf, p.sf, p.of), fmaf(hi - p.zf, p.sf, p.of));
    else return pack2((lo - p.zf) * p.sf, (hi - p.zf) * p.sf);
  }
}

// --- the kernel ---------------------------------------------------------------

// What is loaded one group of chunks ahead: the lane's weight words and the
// raw scales/zeros of its two rows per tile. x is read when multiplying: it
// is small and shared by every warp, so it comes from L1.
struct Chunk {
  unsigned w[kTiles][kBits];
  RowRaw rows[kTiles][2];  // rows gq, gq + 8 of each tile
};

__device__ __forceinline__ void load_chunk(const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
                                           const void* __restrict__ zeros, const int (&tile)[kTiles], int kc, int lane,
                                           Chunk& c) {
  const int gq = lane / 4, t = lane % 4;
  const int group = (kc * 64 + 16 * t) / kGroup;  // a lane's 16 k never straddle a group (g >= 32)
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    load_tile(qweight + (static_cast<long long>(tile[i]) * kChunks + kc) * 32 * kBits, lane, c.w[i]);
#pragma unroll
    for (int h = 0; h < 2; ++h) c.rows[i][h] = load_row(scales, zeros, group, tile[i] * 16 + gq + 8 * h);
  }
}

__device__ __forceinline__ void mma_chunk(const Chunk& c, const TX* __restrict__ x, int kc, int m0, int M, int lane,
                                          float (&acc)[kTiles][kMTiles][4]) {
  unsigned b[kMTiles][8];
#pragma unroll
  for (int j = 0; j < kMTiles; ++j) load_x(x, m0 + 8 * j + lane / 4, M, kc * 64 + 16 * (lane % 4), b[j]);
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const RowParams rp[2] = {row_params(c.rows[i][0]), row_params(c.rows[i][1])};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      // Register R = 4s + r belongs to row gq + 8(r%2).
      unsigned a[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = dequant2(fields(c.w[i], 4 * s + r), rp[r % 2]);
#pragma unroll
      for (int j = 0; j < kMTiles; ++j) qjit::mma_16816<TS>(acc[i][j], a[0], a[1], a[2], a[3], b[j][2 * s], b[j][2 * s + 1]);
    }
  }
}

// Shared-memory pipeline (kStages > 0): each lane cp.async-copies its own
// words of a chunk into its slot of a kStages-deep ring and later reads back
// only what it copied, so no lane ever waits for another. Bytes in flight are
// then kStages chunks per warp without holding registers for them (the
// register pipeline's limit). Slots are laid out [vector][lane] like the
// global tile, so the reads are conflict-free.
constexpr int kRingStages = kStages > 0 ? kStages : 1;
constexpr int kChunkWords = kTiles * kBits * 32;  // one chunk of a warp's tiles

__device__ __forceinline__ void copy_chunk(const unsigned* __restrict__ qweight, const int (&tile)[kTiles], int kc,
                                           int lane, unsigned* slot) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int v = 0; v < kBits / kVec; ++v) {
      const unsigned* src = qweight + (static_cast<long long>(tile[i]) * kChunks + kc) * 32 * kBits + (v * 32 + lane) * kVec;
      const unsigned dst =
          static_cast<unsigned>(__cvta_generic_to_shared(slot + i * kBits * 32 + (v * 32 + lane) * kVec));
      if constexpr (kVec == 4) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
      else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src), "n"(4 * kVec) : "memory");
    }
}

__device__ __forceinline__ void read_slot(const unsigned* slot, int lane, unsigned (&w)[kTiles][kBits]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int v = 0; v < kBits / kVec; ++v) {
      const unsigned* p = slot + i * kBits * 32 + (v * 32 + lane) * kVec;
      if constexpr (kVec == 4) {  // one 16-byte shared load
        const uint4 r = *reinterpret_cast<const uint4*>(p);
        w[i][4 * v] = r.x, w[i][4 * v + 1] = r.y, w[i][4 * v + 2] = r.z, w[i][4 * v + 3] = r.w;
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) w[i][kVec * v + j] = p[j];
      }
    }
}

__device__ __forceinline__ void stream_chunks(const TX* __restrict__ x, const unsigned* __restrict__ qweight,
                                              const TS* __restrict__ scales, const void* __restrict__ zeros,
                                              const int (&tile)[kTiles], int part, int m0, int M, int lane, int warp,
                                              float (&acc)[kTiles][kMTiles][4]) {
  __shared__ __align__(16) unsigned ring[kWarps][kRingStages][kChunkWords];
  // The warp's chunks are part, part + kSplitK, ...: number i is chunk part + i·kSplitK.
  const int count = part < kChunks ? (kChunks - 1 - part) / kSplitK + 1 : 0;
#pragma unroll
  for (int s = 0; s < kRingStages - 1; ++s) {
    if (s < count) copy_chunk(qweight, tile, part + s * kSplitK, lane, ring[warp][s]);
    asm volatile("cp.async.commit_group;" ::: "memory");  // empty groups keep the count uniform
  }
  Chunk c;
  if (count > 0) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) c.rows[t][h] = load_row(scales, zeros, (part * 64 + 16 * (lane % 4)) / kGroup, tile[t] * 16 + lane / 4 + 8 * h);
  }
  for (int i = 0; i < count; ++i) {
    const int ahead = i + kRingStages - 1;
    if (ahead < count) copy_chunk(qweight, tile, part + ahead * kSplitK, lane, ring[warp][ahead % kRingStages]);
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group %0;" ::"n"(kRingStages - 1) : "memory");  // chunk i has landed
    read_slot(ring[warp][i % kRingStages], lane, c.w);
    // The next chunk's scales and zeros load while this one is multiplied.
    Chunk n;
    if (i + 1 < count) {
      const int kc = part + (i + 1) * kSplitK;
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) n.rows[t][h] = load_row(scales, zeros, (kc * 64 + 16 * (lane % 4)) / kGroup, tile[t] * 16 + lane / 4 + 8 * h);
    }
    mma_chunk(c, x, part + i * kSplitK, m0, M, lane, acc);
#pragma unroll
    for (int t = 0; t < kTiles; ++t) c.rows[t][0] = n.rows[t][0], c.rows[t][1] = n.rows[t][1];
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ float epilogue(float v, const TX* __restrict__ bias, int n) {
  if constexpr (kHasBias) v += qjit::to_f32(bias[n]);
  if constexpr (kAct >= 1) v = fmaxf(v, 0.0f);
  if constexpr (kAct == 2) v = fminf(v, 6.0f);
  return v;
}

extern "C" __global__ void __launch_bounds__(kThreads)
qjit_wq_gemm(const TX* __restrict__ x, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
             const void* __restrict__ zeros, const TX* __restrict__ bias, TX* __restrict__ y, int M) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane / 4, t = lane % 4;
  const int row_group = warp / kSplitK, part = warp % kSplitK;
  const int first_tile = (blockIdx.x * kGroupsPerBlock + row_group) * kTiles;
  int tile[kTiles];  // tiles past the last one re-read it (valid memory) and store nothing
#pragma unroll
  for (int i = 0; i < kTiles; ++i) tile[i] = min(first_tile + i, kNTiles - 1);

  for (int m0 = blockIdx.y * kMBlock; m0 < M; m0 += gridDim.y * kMBlock) {
    float acc[kTiles][kMTiles][4];
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    if constexpr (kStages > 0) {
      stream_chunks(x, qweight, scales, zeros, tile, part, m0, M, lane, warp, acc);
    } else {
      // Register pipeline: the loads of the next kUnroll chunks are issued
      // before the current ones are multiplied, so a warp always has weights
      // in flight (without it each chunk waits a full DRAM latency).
      constexpr int kStride = kSplitK * kUnroll;
      Chunk cur[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (part + u * kSplitK < kChunks) load_chunk(qweight, scales, zeros, tile, part + u * kSplitK, lane, cur[u]);
      for (int kc = part; kc < kChunks; kc += kStride) {
        Chunk next[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (kc + kStride + u * kSplitK < kChunks)
            load_chunk(qweight, scales, zeros, tile, kc + kStride + u * kSplitK, lane, next[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (kc + u * kSplitK < kChunks) mma_chunk(cur[u], x, kc + u * kSplitK, m0, M, lane, acc);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) cur[u] = next[u];
      }
    }

    if constexpr (kSplitK > 1) {
      // Lane-for-lane sum of the kSplitK warps of a row group.
      __shared__ float partial[kWarps][kTiles][kMTiles][4][32];
#pragma unroll
      for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int j = 0; j < kMTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) partial[warp][i][j][e][lane] = acc[i][j][e];
      __syncthreads();
      if (part == 0) {
#pragma unroll
        for (int i = 0; i < kTiles; ++i)
#pragma unroll
          for (int j = 0; j < kMTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
#pragma unroll
              for (int s = 1; s < kSplitK; ++s) acc[i][j][e] += partial[warp + s][i][j][e][lane];
      }
      __syncthreads();  // partial is reused by the next pass over m
    }

    if (part == 0) {
      // Accumulator e of lane (gq, t): row gq + 8(e/2) of the tile = column n of y,
      // column 2t + e%2 of B = row m of y.
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        if (first_tile + i >= kNTiles) continue;
#pragma unroll
        for (int j = 0; j < kMTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int n = (first_tile + i) * 16 + gq + 8 * (e / 2), m = m0 + 8 * j + 2 * t + e % 2;
            if (m < M) y[static_cast<long long>(m) * kN + n] = qjit::from_f32<TX>(epilogue(acc[i][j][e], bias, n));
          }
      }
    }
  }
}
