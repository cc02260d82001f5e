// wq_gemm for large M on Hopper's warpgroup tensor-core instruction (wgmma,
// sm_90a): same contract as wq_gemm_mma.cu. On Hopper mma.sync reaches only
// part of the tensor cores' rate (the tiled kernel: 33% tensor-pipe use at
// M = 256 on the H100); wgmma is the instruction that can reach the rest.
//
// A block is kGroups warpgroups of 4 warps. Warp w of warpgroup g owns tile
// 4g + w of the block's kBlockTiles tiles of 16 rows of n (blockIdx.y); all
// multiply the same kBlockRows rows of x (blockIdx.x, the fastest-varying).
// Per chunk of 64 k and step s of 16 k, each warpgroup issues one
// wgmma.m64n<kBlockRows>k16: A (64 rows of n × 16 k) from registers, B
// (16 k × kBlockRows rows of x) from shared memory.
//
// A from registers: wgmma's A fragment of warp w is mma.m16n8k16's A fragment
// of rows 16w .. 16w + 15 (PTX ISA, "Register fragments: matrix A" of
// wgmma .m64nNk16), so a warp dequantises its tile's native words exactly as
// the small-M kernel does (wq_dequant.cuh), lane (gq, t) step s: physical k
// 16t + 4s + 2(r/2) + {0, 1}.
//
// B in shared memory (sB), written from the ring's raw x (wq_stage_ring.cuh)
// in the order A's registers put k in: logical k 2t + e of step s is physical
// 16t + 4s + e, logical 2t + 8 + e is 16t + 4s + 2 + e. sB is wgmma's
// canonical K-major layout with the 128-byte swizzle: a chunk's row of x is
// 128 bytes (64 logical k, step s at bytes 32s .. 32s + 32), 8 rows make a
// 1024-byte atom, and 16-byte piece c of row r sits at piece c ^ (r % 8), so
// the tensor cores' reads of one step (and the writes below) spread over all
// banks; without the swizzle a step's 32-byte columns of 8 rows share 8 banks.
// The descriptor of step s starts 32s bytes into the atom (the hardware
// applies the XOR to the address it forms); atoms of 8 rows are 1024 bytes
// apart (the stride dimension byte offset).
//
// Per iteration it: issue the wgmma of ring stage it (kChunksPerStage chunks
// of 64 k, 4 steps each; A registers and sB buffer it % 2), then, while the
// tensor cores run, refill the stage freed earlier, wait for stage it + 1,
// dequantise stage it + 1 into the other A registers and write its x into the
// other sB buffer (fence.proxy.async: the tensor cores read sB through the
// async proxy), barrier. Two chunks per stage halve the barriers per FLOP.
#include "qjit/wq_gemm/wq_dequant.cuh"

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wq_gemm's wgmma family needs the sm_90a target (compute capability 9.0)"
#endif

constexpr int kThreads = 128 * kGroups;
constexpr int kBlockTiles = 4 * kGroups;
constexpr int kBlockRows = kRows;
constexpr int kWarpsK = kChunksPerStage;  // the ring's chunks per stage (all warps multiply all of them)
#include "qjit/wq_gemm/wq_stage_ring.cuh"
#include "qjit/wq_gemm/wq_gemm_epilogue.cuh"

constexpr int kAcc = kBlockRows / 2;                   // accumulators per thread: 64 × kBlockRows / 128
constexpr int kSbBytes = kBlockRows * 128;             // one chunk of sB: rows of 64 k
constexpr int kSbStage = kChunksPerStage * kSbBytes;   // one stage of sB
static_assert(sizeof(TX) == 2, "the wgmma kernel stages 16-bit x");
static_assert(kMatrices == 1, "wq_gemm multiplies one matrix");
static_assert(kBlockRows <= kBucketM, "a block covers at most the bucket's rows of x");
static_assert(kStages >= 3, "the ring holds the stage multiplied, the one prepared and one in flight");
static_assert(kBlockRows == 64 || kBlockRows == 128 || kBlockRows == 256, "wgmma n of 64, 128 or 256");

using qjit::allow_next_grid;

// --- wgmma -------------------------------------------------------------------

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
// start address >> 4 (bits 0-13), leading dimension byte offset (unused by
// swizzled K-major layouts; 1), stride dimension byte offset 1024 >> 4 (bits
// 32-45), swizzle mode 1 = 128 bytes (bits 62-63). The atom is 1024-byte
// aligned, so the matrix base offset (bits 49-51) is 0.
__device__ __forceinline__ unsigned long long sb_descriptor(const unsigned char* step) {
  const unsigned long long addr = static_cast<unsigned>(__cvta_generic_to_shared(step));
  return ((addr & 0x3ffff) >> 4) | 1ull << 16 | (1024ull >> 4) << 32 | 1ull << 62;
}

// d += A · B for one step of 16 k: A the warp's 4 registers, B at desc.
template <int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc);

// Operands: the kAcc accumulators, A's 4 registers, B's descriptor, and 1
// for scale-d (D = A·B + D). T is the input type's PTX name.
#define QJIT_ACC8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define QJIT_WGMMA_N64(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %37, 0;\n wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24)                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<64>(float (&d)[32], const unsigned (&a)[4], unsigned long long desc) {
  if constexpr (kHalf) QJIT_WGMMA_N64("f16");
  else QJIT_WGMMA_N64("bf16");
}
#undef QJIT_WGMMA_N64

#define QJIT_WGMMA_N128(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %69, 0;\n wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24), QJIT_ACC8(32), QJIT_ACC8(40), QJIT_ACC8(48), QJIT_ACC8(56)                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<128>(float (&d)[64], const unsigned (&a)[4], unsigned long long desc) {
  if constexpr (kHalf) QJIT_WGMMA_N128("f16");
  else QJIT_WGMMA_N128("bf16");
}
#undef QJIT_WGMMA_N128

#define QJIT_WGMMA_N256(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %133, 0;\n wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24), QJIT_ACC8(32), QJIT_ACC8(40), QJIT_ACC8(48), QJIT_ACC8(56), QJIT_ACC8(64), QJIT_ACC8(72), QJIT_ACC8(80), QJIT_ACC8(88), QJIT_ACC8(96), QJIT_ACC8(104), QJIT_ACC8(112), QJIT_ACC8(120)                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<256>(float (&d)[128], const unsigned (&a)[4], unsigned long long desc) {
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

// --- preparing a chunk -------------------------------------------------------------

// Writes the chunk's rows of x into sB in the order described at the top:
// piece c of row m (physical k 8c .. 8c + 8, t = c / 2, steps 2(c % 2) and
// 2(c % 2) + 1) holds, per step s, the words of logical k 2t (h = 0) and
// 2t + 8 (h = 1): logical bytes 32s + 16h + 4t of row m, in 16-byte piece
// (2s + h) ^ (m % 8) after the swizzle.
__device__ __forceinline__ void write_sb(const uint4* chunk, unsigned char* sb) {
  const uint4* rows = chunk + kWPieces + kSPieces + kZPieces;
#pragma unroll
  for (int r = 0; r < (kBlockRows * 8 + kThreads - 1) / kThreads; ++r) {
    const int p = r * kThreads + threadIdx.x;  // row p / 8, piece p % 8
    if ((kBlockRows * 8) % kThreads != 0 && p >= kBlockRows * 8) break;
    const int m = p / 8, c = p % 8, t = c / 2, s0 = 2 * (c % 2);
    unsigned v[4];
    to_mma_type(rows[m * kRowPieces + c], v);  // words: (s0, h0), (s0, h1), (s0 + 1, h0), (s0 + 1, h1)
    unsigned char* row = sb + m * 128;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int piece = (2 * (s0 + i / 2) + i % 2) ^ (m % 8);
      *reinterpret_cast<unsigned*>(row + piece * 16 + 4 * t) = v[i];
    }
  }
}

// --- the kernel ----------------------------------------------------------------

// Buffer B of sB and a[B]: one iteration (kChunksPerStage chunks), for a
// compile-time buffer index.
template <int B>
__device__ __forceinline__ void iteration(int it, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
                                          const void* __restrict__ zeros, const TX* __restrict__ x, int m0, int M,
                                          int first_tile, int bt, int lane, uint4* ring, unsigned char* sb,
                                          unsigned (&a)[2][kChunksPerStage][4][4], float (&acc)[kAcc]) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");  // orders this warp's writes of a[B] before the wgmma
#pragma unroll
  for (int kk = 0; kk < kChunksPerStage; ++kk)
    if (it * kChunksPerStage + kk < kChunks)  // the last stage may hold fewer chunks
#pragma unroll
      for (int s = 0; s < 4; ++s)
        wgmma_k16<kBlockRows>(acc, a[B][kk][s], sb_descriptor(sb + B * kSbStage + kk * kSbBytes + 32 * s));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");

  // Refill the ring while the tensor cores run: its slot held stage it - 1,
  // read by every thread before the last barrier of iteration it - 2.
  ring_refill(qweight, scales, zeros, x, first_tile, m0, M, it + kStages - 1, ring);
  // This thread's pieces of stage it + 1 (kStages + it groups committed, it + 2 needed).
  asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
  // Stage it - 1's wgmma are done (their A registers and sB buffer are reused below).
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  __syncthreads();  // everyone's pieces of stage it + 1; every warpgroup done with stage it - 1
  if (it + 1 < kIters) {
    const uint4* next = ring + ((it + 1) % kStages) * kStagePieces;
#pragma unroll
    for (int kk = 0; kk < kChunksPerStage; ++kk)
      if ((it + 1) * kChunksPerStage + kk < kChunks) {
        dequant_lane(next + kk * kChunkPieces, bt, lane, a[1 - B][kk]);
        write_sb(next + kk * kChunkPieces, sb + (1 - B) * kSbStage + kk * kSbBytes);
      }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // sB is read by the tensor cores
  }
  __syncthreads();  // sB buffer 1 - B is complete
}

extern "C" __global__ void __launch_bounds__(kThreads)
qjit_wq_gemm(const TX* __restrict__ x, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
             const void* __restrict__ zeros, const TX* __restrict__ bias, const TX* residual, TX* y, int M) {
  // kStages × kStagePieces of ring, then two chunks of sB from the next
  // 1024-byte boundary (the swizzle atoms' alignment; the host adds 1024 bytes).
  extern __shared__ __align__(128) uint4 ring[];
  const unsigned ring_end = static_cast<unsigned>(__cvta_generic_to_shared(ring + kStages * kStagePieces));
  unsigned char* sb = reinterpret_cast<unsigned char*>(ring + kStages * kStagePieces) + ((1024 - ring_end % 1024) % 1024);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane / 4, t = lane % 4;
  const int first_tile = blockIdx.y * kBlockTiles;
  const int bt = warp;  // the warp's tile in the block: warpgroup warp / 4, warp warp % 4 of it
  allow_next_grid();

  // Every bucket but 1024 covers M in one pass; 1024 loops over any M.
  for (int m0 = blockIdx.x * kBlockRows; m0 < M; m0 += gridDim.x * kBlockRows) {
    __syncthreads();  // the previous pass is done with the ring and sB
    float acc[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    fence_acc(acc);
    unsigned a[2][kChunksPerStage][4][4];

    ring_prologue(qweight, scales, zeros, x, first_tile, m0, M, ring);
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kChunksPerStage; ++kk)
      if (kk < kChunks) {
        dequant_lane(ring + kk * kChunkPieces, bt, lane, a[0][kk]);
        write_sb(ring + kk * kChunkPieces, sb + kk * kSbBytes);
      }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    // Unrolled by two so the A-register buffer index is a constant.
#pragma unroll 1
    for (int it = 0; it < kIters; it += 2) {
      iteration<0>(it, qweight, scales, zeros, x, m0, M, first_tile, bt, lane, ring, sb, a, acc);
      if (it + 1 < kIters) iteration<1>(it + 1, qweight, scales, zeros, x, m0, M, first_tile, bt, lane, ring, sb, a, acc);
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
