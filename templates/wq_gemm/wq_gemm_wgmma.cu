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
// B in shared memory (sB), copied from global by cp.async 4 bytes at a time
// in the order A's registers put k in: logical k 2t + e of step s is physical
// 16t + 4s + e, logical 2t + 8 + e is 16t + 4s + 2 + e. sB is wgmma's
// canonical K-major layout with the 128-byte swizzle: a chunk's row of x is
// 128 bytes (64 logical k, step s at bytes 32s .. 32s + 32), 8 rows make a
// 1024-byte atom, and 16-byte piece c of row r sits at piece c ^ (r % 8), so
// the tensor cores' reads of one step (and the copies below) spread over all
// banks; without the swizzle a step's 32-byte columns of 8 rows share 8 banks.
// (The 4-byte permutation is why no 16-byte copy or TMA box can do this:
// a lane's 16 physical k are contiguous, its places in sB are not.)
// The descriptor of step s starts 32s bytes into the atom (the hardware
// applies the XOR to the address it forms); atoms of 8 rows are 1024 bytes
// apart (the stride dimension byte offset). x needs no conversion on the way
// (the family requires x of the scales' type), so no thread touches it.
//
// Pipeline: kStages ring slots, each holding one stage (kChunksPerStage
// chunks of 64 k): the weights, scales and zeros in the cp.async ring of
// wq_stage_ring.cuh, x in its sB slot. Per iteration it: issue the wgmma of
// stage it (A registers a[it % 2]), wait for this warpgroup's wgmma of stage
// it - 1 and for stage it + 1's copies, one barrier, refill the slot stage
// it - 1 used with stage it + kStages - 1, and, while the tensor cores run,
// dequantise stage it + 1 into the other A registers. One barrier per
// iteration; two chunks per stage halve them per FLOP.
//
// Split k (kSplit > 1): a cluster of kSplit blocks along z shares one output
// tile, each taking kMine consecutive stages, and adds its sums through
// distributed shared memory at the end (below). It fills the SMs when the
// output has few tiles: 4096 × 11008 at M = 256 has 86 tiles of 128 × 256
// for 132 SMs.
//
// No wgmma may sit behind a branch: ptxas then serialises every wgmma of the
// kernel (info C7520; a 25% loss measured on the H100). So every block runs
// kMine iterations, a compile-time count, and stages past k run on zeros.
//
// Producer (kProducer = 1): one more warpgroup issues every copy (weights
// and x), so the warpgroups that multiply only dequantise and issue wgmma;
// the one barrier per iteration still orders them. The roles are branched on
// a shuffled (so provably warp-uniform) warpgroup index, which ptxas accepts
// around wgmma.
#include "qjit/wq_gemm/wq_dequant.cuh"

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wq_gemm's wgmma family needs the sm_90a target (compute capability 9.0)"
#endif

constexpr int kMmaThreads = 128 * kGroups;                 // the warpgroups that dequantise and multiply
constexpr int kThreads = kMmaThreads + 128 * kProducer;     // and the producer warpgroup, if any
constexpr int kCopyThreads = kProducer ? 128 : kThreads;    // who issues the cp.async copies (wq_stage_ring.cuh)
constexpr int kCopyFirst = kProducer ? kMmaThreads : 0;
constexpr int kBlockTiles = 4 * kGroups;
constexpr int kBlockRows = kRows;
constexpr int kWarpsK = kChunksPerStage;  // the ring's chunks per stage (all warps multiply all of them)
constexpr int kRingRows = 0;              // x goes straight to sB
#include "qjit/wq_gemm/wq_stage_ring.cuh"
#include "qjit/wq_gemm/wq_gemm_epilogue.cuh"

constexpr int kAcc = kBlockRows / 2;                   // accumulators per thread: 64 × kBlockRows / 128
constexpr int kSbBytes = kBlockRows * 128;             // one chunk of sB: rows of 64 k
constexpr int kSbStage = kChunksPerStage * kSbBytes;   // one stage of sB
static_assert(sizeof(TX) == 2 && qjit::IsBf16<TX>::value == qjit::IsBf16<TS>::value,
              "the wgmma kernel copies x unconverted: 16-bit, the scales' type");
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

// --- copying x ----------------------------------------------------------------

// Row r of a warp's rows (a constant once unrolled) exists when r < live; otherwise
// ignore-src reads nothing and writes 4 zero bytes (rows of x past M). The
// comparison sits in the asm so the compiler does not hoist one per row out
// of the main loop (they would hold registers the accumulators need).
__device__ __forceinline__ void cp_async4(unsigned char* dst, const void* src, int r, int live) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("{.reg .pred p;\n setp.le.s32 p, %2, %3;\n cp.async.ca.shared.global [%0], [%1], 4, p;\n}"
               ::"r"(d), "l"(src), "r"(live), "r"(r) : "memory");
}
__device__ __forceinline__ void cp_async4(unsigned char* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}

// The stage's rows of x into its sB slot. Copying warp w copies rows w·R ..
// w·R + R (R = kBlockRows / copying warps, a multiple of 8), one row of a chunk per
// instruction: lane j reads word j (128 contiguous bytes), physical k
// 2j = 16t + 4s + 2h with t = j / 8, s = (j / 2) % 4, h = j % 2, and writes it
// to logical bytes 32s + 16h + 4t of the row: offset 4t of 16-byte piece
// (2s + h) ^ (m % 8), where m % 8 = r % 8 is a constant. The 32 words of a
// row land in 32 distinct banks; every address is a per-thread base plus a
// constant, so the unrolled copies hold no registers across the main loop.
__device__ __forceinline__ void copy_x_sb(const TX* __restrict__ x, int m0, int M, int stage_index,
                                          unsigned char* slot) {
  constexpr int kRowsPerWarp = kBlockRows / (kCopyThreads / 32);
  static_assert(kRowsPerWarp % 8 == 0, "a warp's first row starts a swizzle atom");
  const int warp = copy_thread() / 32, lane = threadIdx.x % 32;
  const int piece = 2 * ((lane / 2) % 4) + lane % 2, offset = 4 * (lane / 8);
  const int first = warp * kRowsPerWarp, live = M - m0 - first;  // rows r < live exist
  const TX* src = x + static_cast<long long>(m0 + first) * kK + 2 * lane;
  unsigned char* dst = slot + first * 128 + offset;
#pragma unroll
  for (int kk = 0; kk < kChunksPerStage; ++kk) {
    const int kc = stage_index * kChunksPerStage + kk;
    const int rows = kc < kChunks ? live : 0;  // chunks past k (a split's padding stages) are zeros
    if (rows >= kRowsPerWarp) {  // all rows exist (every block but the last along M): no predicate
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        cp_async4(dst + kk * kSbBytes + r * 128 + ((piece ^ (r % 8)) * 16), src + r * kK + kc * 64);
    } else {
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        cp_async4(dst + kk * kSbBytes + r * 128 + ((piece ^ (r % 8)) * 16), src + r * kK + kc * 64, r, rows);
    }
  }
}

// --- the kernel ----------------------------------------------------------------

// The A registers of stage `stage` (ring slot `at`): zeros for chunks past k,
// whose wgmma still run (on zeros: no branch around a wgmma, which ptxas
// would answer by serialising every wgmma, C7520).
__device__ __forceinline__ void dequant_stage(const uint4* at, int stage, int bt, int lane,
                                              unsigned (&a)[kChunksPerStage][4][4]) {
#pragma unroll
  for (int kk = 0; kk < kChunksPerStage; ++kk) {
    if (stage * kChunksPerStage + kk < kChunks) {
      dequant_lane(at + kk * kChunkPieces, bt, lane, a[kk]);
    } else {
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r) a[kk][s][r] = 0;
    }
  }
}

// One iteration with A-register buffer B (a compile-time index); `end` is
// one past the block's last stage.
template <int B, class CopyX>
__device__ __forceinline__ void iteration(int it, int end, bool mma, bool copier, const unsigned* __restrict__ qweight,
                                          const TS* __restrict__ scales, const void* __restrict__ zeros,
                                          int first_tile, int bt, int lane, uint4* ring, const unsigned char* sb,
                                          unsigned (&a)[2][kChunksPerStage][4][4], float (&acc)[kAcc], CopyX stage_x) {
  if (mma) {
    const unsigned char* slot = sb + (it % kStages) * kSbStage;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");  // orders this warp's writes of a[B] before the wgmma
#pragma unroll
    for (int kk = 0; kk < kChunksPerStage; ++kk)
#pragma unroll
      for (int s = 0; s < 4; ++s) wgmma_k16<kBlockRows>(acc, a[B][kk][s], sb_descriptor(slot + kk * kSbBytes + 32 * s));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    // Stage it - 1's wgmma of this warpgroup are done (its A registers are
    // rewritten below, its sB slot refilled after the barrier).
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  }
  if (copier) {
    // This thread's copies of stage it + 1 (kStages - 1 + it groups committed, it + 2 needed),
    // made visible to the tensor cores, which read sB through the async proxy.
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 3) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();  // everyone's copies of stage it + 1; every warpgroup done with stage it - 1
  if (copier) ring_refill(qweight, scales, zeros, first_tile, it + kStages - 1, end, ring, stage_x);
  if (mma && it + 1 < end) dequant_stage(ring + ((it + 1) % kStages) * kStagePieces, it + 1, bt, lane, a[1 - B]);
}

// --- split k over a cluster ------------------------------------------------------

// The kSplit blocks of a cluster (along z: the cluster rank is blockIdx.z)
// take consecutive ranges of the stages of k for the same output tile, then
// add their accumulators through distributed shared memory: each block writes
// its sums into its own (free) ring, and block z adds and stores the
// accumulators 4j..4j + 3 with j % kSplit == z, reading the other blocks'
// sums of the same thread (PTX ISA: mapa, ld.shared::cluster, barrier.cluster).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ float4 load_from_block(const float4* local, unsigned rank) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory");
  return v;
}

// Accumulator 4j + e of lane (gq, t) in warp w: row 16w + gq + 8(e/2) of
// the warpgroup's 64 rows of n (the warp's tile), column 8j + 2t + e%2 of B
// (row m of x).
__device__ __forceinline__ void store_four(const float (&v)[4], int j, int tile, int m0, int M, int lane,
                                           const TX* __restrict__ bias, const TX* residual, TX* y) {
  const int gq = lane / 4, t = lane % 4;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int n = tile * 16 + gq + 8 * (e / 2), m = m0 + 8 * j + 2 * t + e % 2;
    if (m < M) store_y(v[e], bias, residual, y, m, n);
  }
}

extern "C" __global__ void QJIT_WQ_CLUSTER __launch_bounds__(kThreads)
qjit_wq_gemm(const TX* __restrict__ x, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
             const void* __restrict__ zeros, const TX* __restrict__ bias, const TX* residual, TX* y, int M) {
  // kStages × kStagePieces of ring, then kStages slots of sB from the next
  // 1024-byte boundary (the swizzle atoms' alignment; the host adds 1024 bytes).
  extern __shared__ __align__(128) uint4 ring[];
  const unsigned ring_end = static_cast<unsigned>(__cvta_generic_to_shared(ring + kStages * kStagePieces));
  unsigned char* sb = reinterpret_cast<unsigned char*>(ring + kStages * kStagePieces) + ((1024 - ring_end % 1024) % 1024);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_tile = blockIdx.y * kBlockTiles;
  const int bt = warp;  // the warp's tile in the block: warpgroup warp / 4, warp warp % 4 of it
  // This block's kMine stages of k, from `begin`: the z-th of kSplit equal
  // ranges. The last may run past kIters; those stages hold zeros, so every
  // block runs the same, compile-time number of iterations.
  constexpr int kMine = (kIters + kSplit - 1) / kSplit;
  const int begin = blockIdx.z * kMine, end = begin + kMine;
  // Roles: every thread does both without a producer warpgroup.
  const bool mma = kProducer == 0 || __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0) < kGroups;
  const bool copier = kProducer == 0 || !mma;
  allow_next_grid();
  if (!copier) qjit::wait_for_previous_grid();  // the copiers wait inside ring_prologue; y is written after

  // Every bucket but 1024 covers M in one pass; 1024 loops over any M.
  for (int m0 = blockIdx.x * kBlockRows; m0 < M; m0 += gridDim.x * kBlockRows) {
    __syncthreads();  // the previous pass is done with the ring and sB
    float acc[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    fence_acc(acc);
    unsigned a[2][kChunksPerStage][4][4];

    const auto stage_x = [&](int stage_index, int slot) { copy_x_sb(x, m0, M, stage_index, sb + slot * kSbStage); };
    if (copier) {
      ring_prologue(qweight, scales, zeros, first_tile, begin, end, ring, stage_x);
      asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");  // stage `begin`
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (mma) dequant_stage(ring + (begin % kStages) * kStagePieces, begin, bt, lane, a[0]);

    // Unrolled by two so the A-register buffer index is a constant; the trip
    // count is too, so no wgmma sits behind a branch.
#pragma unroll 1
    for (int i = 0; i < kMine / 2; ++i) {
      iteration<0>(begin + 2 * i, end, mma, copier, qweight, scales, zeros, first_tile, bt, lane, ring, sb, a, acc, stage_x);
      iteration<1>(begin + 2 * i + 1, end, mma, copier, qweight, scales, zeros, first_tile, bt, lane, ring, sb, a, acc, stage_x);
    }
    if constexpr (kMine % 2 == 1)
      iteration<0>(end - 1, end, mma, copier, qweight, scales, zeros, first_tile, bt, lane, ring, sb, a, acc, stage_x);
    if (mma) asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_acc(acc);
    if (copier) asm volatile("cp.async.wait_all;" ::: "memory");
    const int tile = first_tile + bt;
    if constexpr (kSplit == 1) {
      if (mma && tile < kNTiles) {
#pragma unroll
        for (int j = 0; j < kAcc / 4; ++j) {
          const float v[4] = {acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
          store_four(v, j, tile, m0, M, lane, bias, residual, y);
        }
      }
    } else {
      __syncthreads();  // every warp is done with the ring: it holds the partial sums now
      float4* partial = reinterpret_cast<float4*>(ring);  // [kAcc / 4][kMmaThreads]: conflict-free
      if (mma)
#pragma unroll
        for (int j = 0; j < kAcc / 4; ++j)
          partial[j * kMmaThreads + threadIdx.x] = make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
      cluster_sync();  // every block's sums are visible to the cluster
#pragma unroll
      for (int j = 0; j < kAcc / 4; ++j) {
        if (!mma || j % kSplit != static_cast<int>(blockIdx.z)) continue;
        float v[4] = {acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
        for (int other = 1; other < kSplit; ++other) {
          const float4 p = load_from_block(partial + j * kMmaThreads + threadIdx.x, (blockIdx.z + other) % kSplit);
          v[0] += p.x, v[1] += p.y, v[2] += p.z, v[3] += p.w;
        }
        if (tile < kNTiles) store_four(v, j, tile, m0, M, lane, bias, residual, y);
      }
      cluster_sync();  // no block leaves, or refills its ring, while another reads its sums
    }
  }
}
