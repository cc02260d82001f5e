// wq_gemm for large M on Hopper's warpgroup tensor-core instruction (wgmma,
// sm_90a): same contract as wq_gemm_mma.cu. On Hopper mma.sync reaches only
// part of the tensor cores' rate (the tiled kernel: 33% tensor-pipe use at
// M = 256 on the H100); wgmma is the instruction that can reach the rest.
//
// A block is kGroups warpgroups of 4 warps. Warp w of warpgroup g owns tile
// 4g + w of the block's kBlockTiles tiles of 16 rows of n (blockIdx.y); all
// multiply the same kBlockRows rows of x (blockIdx.x, the fastest-varying).
// Per chunk of 64 k and step s of 16 k, each warpgroup issues one
// wgmma.m64n<kBlockRows>k16 with both operands in shared memory: A (its 64
// rows of n × 16 k, the weights) and B (16 k × kBlockRows rows of x).
//
// Both use wgmma's canonical K-major layout with the 128-byte swizzle: a
// chunk's row (of W or of x) is 128 bytes (64 k in natural order, step s at
// bytes 32s .. 32s + 32), 8 rows make a 1024-byte atom, and 16-byte piece c of
// row r sits at piece c ^ (r % 8), which spreads one step's 32-byte column of
// 8 rows over all banks. The descriptor of step s starts 32s bytes into the
// atom (the hardware applies the XOR to the address it forms); atoms are 1024
// bytes apart (the stride dimension byte offset).
//
// x is copied by cp.async straight into that layout (16-byte piece c of row m
// to piece c ^ (m % 8)), in its own ring of kStages stages (sX). The packed
// weights, scales and zeros go through the shared ring (wq_stage_ring.cuh).
// Each warp dequantises its tile as the small-M kernel does (dequant_lane:
// lane (gq, t) holds rows gq and gq + 8 at k = 16t + 4s + 2h + {0, 1} in
// register 4s + 2h + row half) and stores the registers in natural k order
// into sA, double-buffered.
//
// Per iteration it: issue the wgmma of stage it (sA buffer it % 2, sX stage
// it % kStages; kChunksPerStage chunks of 4 steps); wait for stage it + 1;
// barrier (every warpgroup is also done with stage it - 1); refill the ring
// slot of stage it - 1; dequantise stage it + 1 into the other sA buffer while
// the tensor cores run; fence.proxy.async (the tensor cores read shared memory
// through the async proxy); barrier.
#include "qjit/wq_gemm/wq_dequant.cuh"

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wq_gemm's wgmma family needs the sm_90a target (compute capability 9.0)"
#endif

constexpr int kThreads = 128 * kGroups;
constexpr int kBlockTiles = 4 * kGroups;
constexpr int kBlockRows = kRows;
constexpr int kWarpsK = kChunksPerStage;  // the ring's chunks per stage (all warps multiply all of them)
constexpr bool kRingHoldsX = false;       // x has its own ring, sX, in wgmma's layout
#include "qjit/wq_gemm/wq_stage_ring.cuh"
#include "qjit/wq_gemm/wq_gemm_epilogue.cuh"

constexpr int kAcc = kBlockRows / 2;                // accumulators per thread: 64 × kBlockRows / 128
constexpr int kXChunkBytes = kBlockRows * 128;      // one chunk of sX
constexpr int kXStageBytes = kChunksPerStage * kXChunkBytes;
constexpr int kAChunkBytes = 64 * 128;              // one warpgroup's chunk of sA
constexpr int kABufferBytes = kGroups * kChunksPerStage * kAChunkBytes;
static_assert(sizeof(TX) == 2, "the wgmma kernel stages 16-bit x");
static_assert(qjit::IsBf16<TX>::value == qjit::IsBf16<TS>::value, "x is copied as it is: it must be the mma type");
static_assert(kStages >= 3, "the ring holds the stage multiplied, the one prepared and one in flight");
static_assert(kBlockRows == 64 || kBlockRows == 128 || kBlockRows == 256, "wgmma n of 64, 128 or 256");

using qjit::allow_next_grid;

// --- wgmma -------------------------------------------------------------------

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
// start address >> 4 (bits 0-13), leading dimension byte offset (unused by
// swizzled K-major layouts; 1), stride dimension byte offset 1024 >> 4 (bits
// 32-45), swizzle mode 1 = 128 bytes (bits 62-63). The atom is 1024-byte
// aligned, so the matrix base offset (bits 49-51) is 0.
__device__ __forceinline__ unsigned long long descriptor(const unsigned char* step) {
  const unsigned long long addr = static_cast<unsigned>(__cvta_generic_to_shared(step));
  return ((addr & 0x3ffff) >> 4) | 1ull << 16 | (1024ull >> 4) << 32 | 1ull << 62;
}

// d += A · B for one step of 16 k, both operands in shared memory.
template <int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b);

// Operands: the kAcc accumulators, A's and B's descriptors, and 1 for
// scale-d (D = A·B + D). T is the input type's PTX name.
#define QJIT_ACC8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define QJIT_WGMMA_N64(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %34, 0;\n wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24)                                                                               \
      : "l"(desc_a), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<64>(float (&d)[32], unsigned long long desc_a, unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_N64("f16");
  else QJIT_WGMMA_N64("bf16");
}
#undef QJIT_WGMMA_N64

#define QJIT_WGMMA_N128(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %66, 0;\n wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24), QJIT_ACC8(32), QJIT_ACC8(40), QJIT_ACC8(48), QJIT_ACC8(56)                                                                               \
      : "l"(desc_a), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<128>(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_N128("f16");
  else QJIT_WGMMA_N128("bf16");
}
#undef QJIT_WGMMA_N128

#define QJIT_WGMMA_N256(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %130, 0;\n wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24), QJIT_ACC8(32), QJIT_ACC8(40), QJIT_ACC8(48), QJIT_ACC8(56), QJIT_ACC8(64), QJIT_ACC8(72), QJIT_ACC8(80), QJIT_ACC8(88), QJIT_ACC8(96), QJIT_ACC8(104), QJIT_ACC8(112), QJIT_ACC8(120)                                                                               \
      : "l"(desc_a), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<256>(float (&d)[128], unsigned long long desc_a, unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_N256("f16");
  else QJIT_WGMMA_N256("bf16");
}
#undef QJIT_WGMMA_N256
#undef QJIT_ACC8

// Orders the accumulators' other uses (zeroing, the epilogue) around the
// wgmma asm. Only where no wgmma is in flight: ptxas makes a read of an
// accumulator wait for every wgmma writing it, so a fence between two
// iterations would serialise the tensor cores with the dequantisation.
__device__ __forceinline__ void fence_acc(float (&d)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// --- staging -------------------------------------------------------------------

// The stage's rows of x into sX (rows m0 + r >= M are zero-filled).
__device__ __forceinline__ void copy_x_swizzled(const TX* __restrict__ x, int m0, int M, int stage_index,
                                                unsigned char* sx_stage) {
#pragma unroll
  for (int kk = 0; kk < kChunksPerStage; ++kk) {
    const int kc = stage_index * kChunksPerStage + kk;
    if (kc >= kChunks) break;
#pragma unroll
    for (int r = 0; r < (kBlockRows * 8 + kThreads - 1) / kThreads; ++r) {
      const int p = r * kThreads + threadIdx.x;  // row p / 8, piece p % 8
      if ((kBlockRows * 8) % kThreads != 0 && p >= kBlockRows * 8) break;
      const int row = p / 8, piece = p % 8;
      const bool live = m0 + row < M;
      const TX* src = x + static_cast<long long>(live ? m0 + row : 0) * kK + kc * 64 + 8 * piece;
      unsigned char* dst = sx_stage + kk * kXChunkBytes + row * 128 + ((piece ^ (row % 8)) * 16);
      cp_async16(reinterpret_cast<uint4*>(dst), src, live);
    }
  }
}

// The warp's tile of the stage's chunks, dequantised into its 16 rows of the
// warpgroup's sA chunks: lane (gq, t)'s registers 4s + 2h + e (row gq + 8e)
// hold k = 16t + 4s + 2h + {0, 1}; h = 0 and 1 are 8 contiguous bytes at byte
// 32t + 8s of the row, in piece (2t + s / 2) ^ (row % 8).
__device__ __forceinline__ void dequant_stage(const uint4* stage, int first, int bt, int lane, unsigned char* sa) {
  const int gq = lane / 4, t = lane % 4, wg = bt / 4, w = bt % 4;
#pragma unroll
  for (int kk = 0; kk < kChunksPerStage; ++kk) {
    if (first + kk >= kChunks) break;
    unsigned a[4][4];
    dequant_lane(stage + kk * kChunkPieces, bt, lane, a);
    unsigned char* chunk = sa + (wg * kChunksPerStage + kk) * kAChunkBytes;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = 16 * w + gq + 8 * e;  // row % 8 == gq
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int piece = (2 * t + s / 2) ^ gq;
        *reinterpret_cast<uint2*>(chunk + row * 128 + piece * 16 + 8 * (s % 2)) = make_uint2(a[s][e], a[s][2 + e]);
      }
    }
  }
}

// --- the kernel ----------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(kThreads)
qjit_wq_gemm(const TX* __restrict__ x, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
             const void* __restrict__ zeros, const TX* __restrict__ bias, const TX* residual, TX* y, int M) {
  // From the next 1024-byte boundary (the swizzle atoms' alignment; the host
  // adds 1024 bytes): sX (kStages stages), sA (two buffers), then the ring.
  extern __shared__ __align__(128) uint4 smem[];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  unsigned char* sx = reinterpret_cast<unsigned char*>(smem) + ((1024 - base % 1024) % 1024);
  unsigned char* sa = sx + kStages * kXStageBytes;
  uint4* ring = reinterpret_cast<uint4*>(sa + 2 * kABufferBytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane / 4, t = lane % 4, wg = warp / 4;
  const int first_tile = blockIdx.y * kBlockTiles;
  const int bt = warp;  // the warp's tile in the block: warpgroup warp / 4, warp warp % 4 of it
  allow_next_grid();

  // Every bucket but 1024 covers M in one pass; 1024 loops over any M.
  for (int m0 = blockIdx.x * kBlockRows; m0 < M; m0 += gridDim.x * kBlockRows) {
    __syncthreads();  // the previous pass is done with shared memory
    float acc[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    fence_acc(acc);

    auto copy_x_of = [&](int stage_index) {
      copy_x_swizzled(x, m0, M, stage_index, sx + (stage_index % kStages) * kXStageBytes);
    };
    ring_prologue(qweight, scales, zeros, first_tile, ring, copy_x_of);
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // this thread's copies of x, for the tensor cores
    __syncthreads();
    dequant_stage(ring, 0, bt, lane, sa);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

#pragma unroll 1
    for (int it = 0; it < kIters; ++it) {
      const unsigned char* a_buf = sa + (it % 2) * kABufferBytes + wg * kChunksPerStage * kAChunkBytes;
      const unsigned char* x_stage = sx + (it % kStages) * kXStageBytes;
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < kChunksPerStage; ++kk)
        if (it * kChunksPerStage + kk < kChunks)  // the last stage may hold fewer chunks
#pragma unroll
          for (int s = 0; s < 4; ++s)
            wgmma_k16<kBlockRows>(acc, descriptor(a_buf + kk * kAChunkBytes + 32 * s),
                                  descriptor(x_stage + kk * kXChunkBytes + 32 * s));
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");

      // This thread's pieces of stage it + 1 (kStages - 1 + it groups committed, it + 2 needed).
      asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 3) : "memory");
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      // Stage it - 1's wgmma are done (its sA buffer and ring slot are reused below).
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      __syncthreads();  // everyone's pieces of stage it + 1; every warpgroup done with stage it - 1
      ring_refill(qweight, scales, zeros, first_tile, it + kStages - 1, ring, copy_x_of);
      if (it + 1 < kIters) {
        dequant_stage(ring + ((it + 1) % kStages) * kStagePieces, (it + 1) * kChunksPerStage, bt, lane,
                      sa + ((it + 1) % 2) * kABufferBytes);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // sA is read by the tensor cores
      }
      __syncthreads();  // sA buffer (it + 1) % 2 is complete
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_acc(acc);
    asm volatile("cp.async.wait_all;" ::: "memory");

    // Accumulator 4j + e of lane (gq, t) in warp w: row 16w + gq + 8(e/2) of
    // the warpgroup's 64 rows of n (the warp's tile), column 8j + 2t + e%2
    // of B (row m of x).
    const int tile = first_tile + bt;
    if (tile < kNTiles) {
#pragma unroll
      for (int j = 0; j < kBlockRows / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = tile * 16 + gq + 8 * (e / 2), m = m0 + 8 * j + 2 * t + e % 2;
          if (m < M) store_y(acc[4 * j + e], bias, residual, y, m, n);
        }
    }
  }
}
