// wq_gemm for large M on the tensor cores: Y[m][n] = clamp(Σ_k x[m][k]·w[k][n]
// + bias[n]) (+ residual[m][n]), w dequantised in registers from qjit's native
// layout (wq_dequant.cuh). Same contract as wq_gemm_mma.cu, the small-M kernel.
//
// Why a second kernel: from M ≈ 64 the mma, not reading W, sets the pace, and
// the small-M mainloop has each warp fetch its own x for one or two tiles of n
// and dequantise its own weights (x bytes per mma = 256 / tiles: L1-bound,
// and about 6 instructions per mma). Here a block stages x once in shared
// memory for all its warps, dequantises each weight of a chunk once into
// shared memory for all its kWarpsM warps of rows of x, and each warp
// multiplies kWN tiles of n by kWM tiles of x, reusing every B fragment kWN
// times and every A fragment kWM times.
//
// Block: kWarpsN × kWarpsM × kWarpsK warps. It owns kBlockTiles = kWN·kWarpsN
// tiles of 16 rows of n (blockIdx.y) and kBlockRows = 8·kWM·kWarpsM rows of x
// (blockIdx.x, the fastest-varying index, so blocks running together share
// their weights in L2). The kWarpsK warps of one (n, m) position take every
// kWarpsK-th chunk of 64 k and add their sums through shared memory at the end.
//
// Pipeline: a ring of kStages stages in dynamic shared memory, filled with
// cp.async by all threads (wq_stage_ring.cuh); stage i holds chunks
// kWarpsK·i .. kWarpsK·i + kWarpsK - 1.
//
// Per iteration: wait for stage it + 1, barrier, refill the stage freed by
// iteration it - 1, dequantise stage it + 1 into one a_frags buffer
// (dequant_stage) and multiply stage it from the other.
// Scales multiply each weight before the mma (dequant2<false>: the
// reference's w, rounded once), so the sums need no per-chunk scaling.
#include "qjit/wq_gemm/wq_dequant.cuh"

constexpr int kWarps = kWarpsN * kWarpsM * kWarpsK;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockTiles = kWN * kWarpsN;
constexpr int kBlockRows = 8 * kWM * kWarpsM;
constexpr int kRingRows = kBlockRows;  // x is staged in the ring
constexpr int kChunkAlign = 1;
constexpr int kCopyThreads = kThreads, kCopyFirst = 0;  // by every thread
#include "qjit/wq_gemm/wq_stage_ring.cuh"
#include "qjit/wq_gemm/wq_gemm_epilogue.cuh"

constexpr int kAFragPieces = kWarpsK * kBlockTiles * 4 * 32;  // a stage's weights dequantised: 16 bytes per lane and step
static_assert(sizeof(TX) == 2, "the tiled kernel stages 16-bit x");
static_assert(kMatrices == 1, "wq_gemm multiplies one matrix");
static_assert(kBlockRows <= kBucketM, "a block covers at most the bucket's rows of x");
static_assert(kStages >= 3, "the ring holds the stage multiplied, the one dequantised and one in flight");

using qjit::allow_next_grid;

// Dequantises the stage's weights once for the whole block into `a_frags`:
// item j (tile bt, lane L, chunk kk) is lane L's 16 A registers of tile bt,
// stored as a[kk][bt][s][L] (one 16-byte piece per mma step s: a warp's
// stores and loads of one step are 512 contiguous bytes, conflict-free).
// Here step s is k pairs 2s and 2s + 1 of the lane's 16 k (a_reg), so that
// mma_chunk takes each half of the lane's x (8 k) for two steps.
// Thread tid does items tid, tid + kThreads, ...: its lane is L, so it reads
// the words and row parameters lane L would.
__device__ __forceinline__ void dequant_stage(const uint4* stage, int stage_index, int lane, uint4* a_frags) {
  constexpr int kItems = kWarpsK * kBlockTiles * 32;
#pragma unroll
  for (int r = 0; r < (kItems + kThreads - 1) / kThreads; ++r) {
    const int j = r * kThreads + threadIdx.x;
    if (kItems % kThreads != 0 && j >= kItems) break;
    const int kk = j / (32 * kBlockTiles), bt = (j / 32) % kBlockTiles;
    if (stage_index * kWarpsK + kk >= kChunks) break;  // past the last chunk (only kk grows with r)
    unsigned a[4][4];
    dequant_lane(stage + kk * kChunkPieces, bt, lane, a);
    uint4* out = a_frags + (kk * kBlockTiles + bt) * 4 * 32 + lane;
#pragma unroll
    for (int st = 0; st < 4; ++st) {
      constexpr auto at = [](const unsigned(&a)[4][4], int R) { return a[R / 4][R % 4]; };
      out[st * 32] = make_uint4(at(a, a_reg(st, 0)), at(a, a_reg(st, 1)), at(a, a_reg(st, 2)), at(a, a_reg(st, 3)));
    }
  }
}

// The warp's kWN × kWM tiles times chunk kk of a stage: A fragments from
// dequant_stage, B fragments from the staged rows of x.
__device__ __forceinline__ void mma_chunk(const uint4* chunk, const uint4* a_frags, int wn, int wm, int lane,
                                          float (&acc)[kWN][kWM][4]) {
  const int gq = lane / 4, t = lane % 4;
  // The lane's first pieces; every other offset below is a compile-time constant.
  const uint4* xl = chunk + kWPieces + kSPieces + kZPieces + (wm * 8 * kWM + gq) * kRowPieces + 2 * t;
  const uint4* al = a_frags + wn * kWN * 4 * 32 + lane;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // x[row][16t + 8·half .. + 8): B words of steps 2·half and 2·half + 1.
    unsigned b[kWM][4];
#pragma unroll
    for (int j = 0; j < kWM; ++j) to_mma_type(xl[8 * j * kRowPieces + half], b[j]);
#pragma unroll
    for (int s = 2 * half; s < 2 * half + 2; ++s)
#pragma unroll
      for (int i = 0; i < kWN; ++i) {
        const uint4 a = al[(i * 4 + s) * 32];
#pragma unroll
        for (int j = 0; j < kWM; ++j)
          qjit::mma_16816<TS>(acc[i][j], a.x, a.y, a.z, a.w, b[j][2 * (s % 2)], b[j][2 * (s % 2) + 1]);
      }
  }
}

// residual may be y itself (y += X·Wᵀ): each element is read and then written
// by the same thread, so neither pointer is __restrict__.
extern "C" __global__ void __launch_bounds__(kThreads)
qjit_wq_gemm(const TX* __restrict__ x, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
             const void* __restrict__ zeros, const TX* __restrict__ bias, const TX* residual, TX* y, int M) {
  extern __shared__ uint4 ring[];  // kStages × kStagePieces (reused for the split-k sums), then a_frags
  uint4* a_frags = ring + kStages * kStagePieces;  // 2 × kAFragPieces: two stages' dequantised weights
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane / 4, t = lane % 4;
  const int wn = warp % kWarpsN, wm = (warp / kWarpsN) % kWarpsM, wk = warp / (kWarpsN * kWarpsM);
  const int first_tile = blockIdx.y * kBlockTiles;
  allow_next_grid();

  // Every bucket but 1024 covers M in one pass; 1024 loops over any M.
  for (int m0 = blockIdx.x * kBlockRows; m0 < M; m0 += gridDim.x * kBlockRows) {
    __syncthreads();  // the previous pass is done with the ring
    float acc[kWN][kWM][4];
#pragma unroll
    for (int i = 0; i < kWN; ++i)
#pragma unroll
      for (int j = 0; j < kWM; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    const auto stage_x = [&](int stage_index, int slot) { copy_x(x, m0, M, stage_index, ring + slot * kStagePieces); };
    ring_prologue(qweight, scales, zeros, first_tile, 0, kIters, ring, stage_x);

    // Stage 0's weights dequantised before the loop; then iteration it
    // dequantises stage it + 1 into the other a_frags buffer while its warps
    // multiply stage it, so the ALU work of dequantisation and the tensor
    // cores overlap, with one barrier per iteration.
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
    __syncthreads();
    dequant_stage(ring, 0, lane, a_frags);
#pragma unroll 1
    for (int it = 0; it < kIters; ++it) {
      // Stage it + 1 has landed (this thread's pieces; groups: kStages - 1 + it committed, it + 2 needed).
      asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 3) : "memory");
      // Everyone's pieces; a_frags[it % 2] is complete; every warp is done
      // with iteration it - 1 (its x stage is refilled below, its a_frags
      // buffer rewritten).
      __syncthreads();
      ring_refill(qweight, scales, zeros, first_tile, it + kStages - 1, kIters, ring, stage_x);
      if (it + 1 < kIters)
        dequant_stage(ring + ((it + 1) % kStages) * kStagePieces, it + 1, lane, a_frags + ((it + 1) % 2) * kAFragPieces);
      if (it * kWarpsK + wk < kChunks)
        mma_chunk(ring + (it % kStages) * kStagePieces + wk * kChunkPieces,
                  a_frags + (it % 2) * kAFragPieces + wk * kBlockTiles * 4 * 32, wn, wm, lane, acc);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");

    if constexpr (kWarpsK > 1) {
      // Lane-for-lane sum of the kWarpsK warps of an (n, m) position, through the ring.
      __syncthreads();  // every warp is done reading the ring
      float* partial = reinterpret_cast<float*>(ring);  // [wk - 1][wn, wm][i][j][e][lane]
      constexpr int kAcc = kWN * kWM * 4;
      const int position = wm * kWarpsN + wn;
      if (wk > 0) {
        float* mine = partial + ((wk - 1) * kWarpsN * kWarpsM + position) * kAcc * 32;
#pragma unroll
        for (int i = 0; i < kWN; ++i)
#pragma unroll
          for (int j = 0; j < kWM; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) mine[((i * kWM + j) * 4 + e) * 32 + lane] = acc[i][j][e];
      }
      __syncthreads();
      if (wk > 0) continue;
#pragma unroll
      for (int s = 1; s < kWarpsK; ++s) {
        const float* theirs = partial + ((s - 1) * kWarpsN * kWarpsM + position) * kAcc * 32;
#pragma unroll
        for (int i = 0; i < kWN; ++i)
#pragma unroll
          for (int j = 0; j < kWM; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += theirs[((i * kWM + j) * 4 + e) * 32 + lane];
      }
    }

    // Accumulator e of lane (gq, t): row gq + 8(e/2) of the tile = column n
    // of y, column 2t + e%2 of B = row m of y.
#pragma unroll
    for (int i = 0; i < kWN; ++i) {
      const int tile = first_tile + wn * kWN + i;
      if (tile >= kNTiles) continue;
#pragma unroll
      for (int j = 0; j < kWM; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = tile * 16 + gq + 8 * (e / 2), m = m0 + wm * 8 * kWM + 8 * j + 2 * t + e % 2;
          if (m >= M) continue;
          store_y(acc[i][j][e], bias, residual, y, m, n);
        }
    }
  }
}
