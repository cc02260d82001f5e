// wq_gemm for large M on Hopper's warpgroup tensor-core instruction (wgmma,
// sm_90a): same contract as wq_gemm_mma.cu. On Hopper mma.sync reaches only
// part of the tensor cores' rate (the tiled kernel: 33% tensor-pipe use at
// M = 256 on the H100); wgmma is the instruction that can reach the rest.
//
// A block is kGroups warpgroups of 4 warps. Warp w of warpgroup g owns tile
// 4g + w of the block's kBlockTiles tiles of 16 rows of n (blockIdx.y); all
// multiply the same kBlockRows rows of x (blockIdx.x, the fastest-varying).
// Per chunk of 64 k and step s of 16 k, each warpgroup issues one
// wgmma.m64n<kBlockRows>k16: A (64 rows of n × 16 k, dequantised weights)
// and B (16 k × kBlockRows rows of x).
//
// Shared memory holds its operands in wgmma's canonical K-major layout with
// the 128-byte swizzle: a chunk's row (of x for B, of n for A) is 128 bytes
// (64 k, step s at bytes 32s .. 32s + 32), 8 rows make a 1024-byte atom, and
// 16-byte piece c of row r sits at piece c ^ (r % 8), so a step's reads (and
// the writes below) spread over all banks; without the swizzle a step's
// 32-byte columns of 8 rows share 8 banks. A step's descriptor starts 32s
// bytes into the atom (the hardware applies the XOR to the address it forms);
// atoms are 1024 bytes apart (the stride dimension byte offset). x needs no
// conversion on the way (the family requires x of the scales' type), so no
// thread touches it.
//
// Each warp dequantises its tile's native words as the small-M kernel does
// (wq_dequant.cuh): lane (gq, t) holds rows gq and gq + 8 of the tile at
// physical k 16t .. 16t + 15. Where A goes is the config's choice (kASmem):
//   - Registers (kASmem = 0). wgmma's A fragment of warp w is mma.m16n8k16's
//     A fragment of rows 16w .. 16w + 15 (PTX ISA, "Register fragments:
//     matrix A" of wgmma .m64nNk16), which holds k 2t, 2t + 1, 2t + 8, 2t + 9
//     of each step in lane t: lane t's step s is physical k 16t + 2s + 8(r/2)
//     + {0, 1}. So x is copied into sB 4 bytes at a time in that order:
//     logical k 2t + e of step s is physical 16t + 2s + e, logical 2t + 8 + e
//     is 16t + 2s + 8 + e (no 16-byte copy can do that permutation). Cheap
//     in shared memory and barriers; one copy instruction per 4 bytes of x.
//   - Shared memory (kASmem = 1, sA). A lane's 16 physical k of a row are 32
//     contiguous bytes in natural order, so it stores them with two 16-byte
//     stores per row, and x is copied in natural order 16 bytes at a time.
//     Costs 16 KB of sA per warpgroup and chunk of a stage (two buffers:
//     the warps dequantise stage it + 1 while the tensor cores read stage it)
//     and a warpgroup barrier per iteration. It wins at 256 rows, where the
//     4-byte copies of x cost more than the wgmma work (H100).
//   - Registers in natural k order (kAQuad = 1, 4-bit): each lane reads the
//     words of its quad's lanes that hold its natural fragments with one
//     ldmatrix (dequant_lane_quad below), so x is copied in natural order as
//     for sA, without sA's stores, reads and barrier. (The key's name is
//     from the quad's exchange of words by shuffles that this read replaced.)
//
// Pipeline: kStages ring slots, each holding one stage (kChunksPerStage
// chunks of 64 k): the weights, scales and zeros in the cp.async ring of
// wq_stage_ring.cuh, x in its sB slot. Per iteration it: (sA: wait for the
// warpgroup's stores of stage it, a 128-thread barrier) issue the wgmma of
// stage it (A buffer it % 2), wait for this warpgroup's wgmma of stage it - 1
// and for stage it + 1's copies, one block barrier, refill the slot stage
// it - 1 used with stage it + kStages - 1, and, while the tensor cores run,
// dequantise stage it + 1 into the other A buffer. Two chunks per stage
// halve the block barriers per FLOP.
//
// Split k (kSplit > 1): a cluster of kSplit blocks along z shares one output
// tile, each taking kMine consecutive stages, and adds its sums through
// distributed shared memory at the end (below). It fills the SMs when the
// output has few tiles: 4096 × 11008 at M = 256 has 86 tiles of 128 × 256
// for 132 SMs. The stream schedule (kStream > 0, wq_stream_schedule.cuh) fills them instead
// with a persistent grid that shares (tile, stage) units evenly.
//
// No wgmma may sit behind a branch: ptxas then serialises every wgmma of the
// kernel (info C7520; a 25% loss measured on the H100). So every block runs
// kMine iterations, a compile-time count, and stages past k run on zeros.
//
// Producer (kProducer = 1): one more warpgroup issues every copy (weights
// and x), so the warpgroups that multiply only dequantise and issue wgmma;
// the one block barrier per iteration still orders them. The roles are branched on
// a shuffled (so provably warp-uniform) warpgroup index, which ptxas accepts
// around wgmma. With warp specialisation (kWs, wq_wgmma_ws.cuh) mbarriers per
// ring slot replace that block barrier, and the producer gives its registers
// to the warpgroups that multiply.
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
constexpr int kChunkAlign = kTmaW ? 8 : 1;  // the weights' tensor copies land on 128-byte boundaries
// A stage of two chunks starts at an even chunk, so with groups of 128 k or more its chunks share their
// scales and zeros: under kTmaW the producer copies them once, into the stage's first chunk, and the
// consumers read them there for both: one box less per stage for each of the scales and zeros, which
// took the producer's issue from ~750 to ~600 cycles a stage and the 64-row winners ~1% faster
// (H100). A in natural order (kAQuad) only, the path measured.
constexpr bool kStageSharesGroup = kTmaW && kAQuad && kChunksPerStage == 2 && kGroup >= 128;
#include "qjit/wq_gemm/wq_stage_ring.cuh"
#include "qjit/wq_gemm/wq_gemm_epilogue.cuh"
#include "qjit/wq_gemm/wq_even_runs.cuh"
#include "qjit/wq_gemm/wq_ws_marks.cuh"

constexpr int kAcc = kBlockRows / 2;                   // accumulators per thread: 64 × kBlockRows / 128
constexpr int kSbBytes = kBlockRows * 128;             // one chunk of sB: rows of 64 k
constexpr int kSbStage = kChunksPerStage * kSbBytes;   // one stage of sB
constexpr int kSaBytes = 64 * 128;                     // one chunk of a warpgroup's sA (kASmem): 64 rows of n
constexpr int kSaStage = kChunksPerStage * kSaBytes;   // one stage of it (one of its two buffers)
static_assert(sizeof(TX) == 2 && qjit::IsBf16<TX>::value == qjit::IsBf16<TS>::value,
              "the wgmma kernel copies x unconverted: 16-bit, the scales' type");
static_assert(kMatrices == 1, "wq_gemm multiplies one matrix");
static_assert(kBlockRows <= kBucketM, "a block covers at most the bucket's rows of x");
static_assert(kStages >= 3, "the ring holds the stage multiplied, the one prepared and one in flight");
static_assert(kBlockRows == 64 || kBlockRows == 128 || kBlockRows == 256, "wgmma n of 64, 128 or 256");

using qjit::allow_next_grid;

// --- wgmma (wq_wgmma_instr.cuh) ----------------------------------------------

#include "qjit/wq_gemm/wq_wgmma_instr.cuh"

// --- copying x ----------------------------------------------------------------

// cp.async of 4 or 16 bytes from src + kSrc bytes to shared address dst +
// kDst, both offsets immediates of the instruction. Written as pointers plus
// constants, ptxas formed every 64-bit source address with its own IADD3 +
// IMAD.X and every destination with two more: five integer instructions per
// 4-byte copy of x, a third of the 64-row kernel's instructions (H100
// SASS). The _row forms copy only when row r of x exists (r < live);
// otherwise ignore-src writes zeros (rows of x past M). The comparison sits
// in the asm so the compiler does not hoist one per row out of the main loop
// (they would hold registers the accumulators need).
template <int kBytes, int kSrc, int kDst>
__device__ __forceinline__ void cp_async_at(unsigned dst, const void* src) {
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0+%2], [%1+%3], 16;" ::"r"(dst), "l"(src), "n"(kDst), "n"(kSrc) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0+%2], [%1+%3], 4;" ::"r"(dst), "l"(src), "n"(kDst), "n"(kSrc) : "memory");
}
template <int kBytes, int kSrc, int kDst, int kRow>
__device__ __forceinline__ void cp_async_row_at(unsigned dst, const void* src, int live) {
  if constexpr (kBytes == 16)
    asm volatile("{.reg .pred p;\n setp.le.s32 p, %2, %4;\n cp.async.cg.shared.global [%0+%3], [%1+%5], 16, p;\n}"
                 ::"r"(dst), "l"(src), "r"(live), "n"(kDst), "n"(kRow), "n"(kSrc) : "memory");
  else
    asm volatile("{.reg .pred p;\n setp.le.s32 p, %2, %4;\n cp.async.ca.shared.global [%0+%3], [%1+%5], 4, p;\n}"
                 ::"r"(dst), "l"(src), "r"(live), "n"(kDst), "n"(kRow), "n"(kSrc) : "memory");
}

// The stage's rows of x into its sB slot, permuted for A in registers.
// Copying warp w copies rows w·R .. w·R + R (R = kBlockRows / copying warps,
// a multiple of 8), one row of a chunk per instruction: lane j reads word j
// (128 contiguous bytes), physical k 2j = 16t + 2s + 8h with t = j / 8, s =
// j % 4, h = (j / 4) % 2, and writes it to logical bytes 32s + 16h + 4t of
// the row: offset 4t of 16-byte piece (2s + h) ^ (m % 8), where m % 8 = r % 8
// is a constant. The 32 words of a row land in 32 distinct banks.
__device__ __forceinline__ void copy_x_permuted(const TX* __restrict__ x, int m0, int M, int stage_index,
                                                unsigned char* slot) {
  constexpr int kRowsPerWarp = kBlockRows / (kCopyThreads / 32);
  static_assert(kRowsPerWarp % 8 == 0, "a warp's first row starts a swizzle atom");
  const int warp = copy_thread() / 32, lane = threadIdx.x % 32;
  const int piece = 2 * (lane % 4) + (lane / 4) % 2, offset = 4 * (lane / 8);
  const int first = warp * kRowsPerWarp, live = M - m0 - first;  // rows r < live exist
  const TX* src = x + static_cast<long long>(m0 + first) * kK + 2 * lane;
  // Row r's word goes to (piece ^ r % 8) · 16 + offset past the row's start.
  // slot and first · 128 are multiples of 1024, so that is row_base + r·128
  // with bits 4-6 of row_base (= piece) XORed by r % 8: eight registers per
  // stage, one per r % 8, and r·128 an immediate.
  const unsigned row_base = static_cast<unsigned>(__cvta_generic_to_shared(slot)) + first * 128 + piece * 16 + offset;
  unsigned swizzled[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) swizzled[c] = row_base ^ (c << 4);
  qjit::static_for<kChunksPerStage>([&](auto kk_) {
    constexpr int kk = decltype(kk_)::value;
    const int kc = stage_index * kChunksPerStage + kk;
    const int rows = kc < kChunks ? live : 0;  // chunks past k (a split's padding stages) are zeros
    const TX* chunk = src + kc * 64;
    if (rows >= kRowsPerWarp) {  // all rows exist (every block but the last along M): no predicate
      qjit::static_for<kRowsPerWarp>([&](auto r_) {
        constexpr int r = decltype(r_)::value;
        cp_async_at<4, r * kK * int(sizeof(TX)), kk * kSbBytes + r * 128>(swizzled[r % 8], chunk);
      });
    } else {
      qjit::static_for<kRowsPerWarp>([&](auto r_) {
        constexpr int r = decltype(r_)::value;
        cp_async_row_at<4, r * kK * int(sizeof(TX)), kk * kSbBytes + r * 128, r>(swizzled[r % 8], chunk, rows);
      });
    }
  });
}

// The stage's rows of x into its sB slot in natural order, for A in shared
// memory. Copying thread c copies piece c % 8 (8 values of k) of rows c / 8
// + j·R for j < kBlockRows / R, R = kCopyThreads / 8 (a multiple of 8, so all
// rows of a thread have the same r % 8 and the same swizzled place): every
// address is a per-thread base plus a constant. The 8 threads of a row write
// its 8 pieces to 8 distinct 16-byte bank groups.
__device__ __forceinline__ void copy_x_natural(const TX* __restrict__ x, int m0, int M, int stage_index,
                                               unsigned char* slot) {
  constexpr int kRowStep = kCopyThreads / 8, kPerThread = kBlockRows / kRowStep;
  static_assert(kRowStep % 8 == 0 && kBlockRows % kRowStep == 0, "a thread's rows share their place in the swizzle");
  const int row = copy_thread() / 8, piece = copy_thread() % 8;
  const int live = M - m0 - row;  // rows row + r with r < live exist
  const TX* src = x + static_cast<long long>(m0 + row) * kK + 8 * piece;
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(slot)) + row * 128 + (piece ^ (row % 8)) * 16;
  const bool full = m0 + kBlockRows <= M;  // every block but the last along M: no predicate
  qjit::static_for<kChunksPerStage>([&](auto kk_) {
    constexpr int kk = decltype(kk_)::value;
    const int kc = stage_index * kChunksPerStage + kk;
    const int rows = kc < kChunks ? live : 0;  // chunks past k (a split's padding stages) are zeros
    const TX* chunk = src + kc * 64;
    if (full && kc < kChunks) {
      qjit::static_for<kPerThread>([&](auto j_) {
        constexpr int j = decltype(j_)::value;
        cp_async_at<16, j * kRowStep * kK * int(sizeof(TX)), kk * kSbBytes + j * kRowStep * 128>(dst, chunk);
      });
    } else {
      qjit::static_for<kPerThread>([&](auto j_) {
        constexpr int j = decltype(j_)::value;
        cp_async_row_at<16, j * kRowStep * kK * int(sizeof(TX)), kk * kSbBytes + j * kRowStep * 128, j * kRowStep>(
            dst, chunk, rows);
      });
    }
  });
}

// --- A: dequantised weights -----------------------------------------------------

// A in natural k order (kAQuad, 4-bit). Native lane (gq, S) holds rows gq
// and gq + 8 at physical k 16S .. 16S + 15, its word t the k pairs 16S + 2t
// and 16S + 2t + 8 (tuner/reference/wq_gemm.h): the natural A fragment of
// step S for lane (gq, t). So ldmatrix.x4 (PTX ISA, "ldmatrix": lane (g, c)
// of matrix i receives 4 bytes c of the matrix's row g, in register i) with
// matrix S's row g = native lane (g, S)'s 16 bytes gives lane (gq, t) in
// register S its natural word of step S: all of the tile's A for the chunk in
// one instruction, which dequantise as native ones. Lane 8S + g gives the
// address of row g of matrix S; the layout's slot XOR puts the 8 rows of a
// matrix in 8 distinct 16-byte bank groups. (It replaced an exchange of the
// words across each quad by two rounds of shuffles, 8-9% of the 64-row
// kernel on an H100; docs/wq_gemm_wgmma.md.) Step S covers k 16S .. 16S + 15 of the
// chunk, so its group is (16S) / kGroup. A template only so that it is
// compiled for 4-bit kernels alone.
template <int kB = kBits>
__device__ __forceinline__ void dequant_lane_quad(const uint4* chunk, const uint4* sz, int bt, int lane,
                                                  unsigned (&a)[4][4]) {
  static_assert(kB == 4, "one 4-bit word is one step of a lane's A fragment");
  const int gq = lane / 4;
  const uint4* row = chunk + bt * 8 * kB + native_slot(4 * (lane % 8) + lane / 8);
  unsigned w[kB];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(row)))
               : "memory");
  RowParams rp[kGroupsPerChunk][2];
#pragma unroll
  for (int gi = 0; gi < kGroupsPerChunk; ++gi)
    rp[gi][0] = staged_row_params(sz, bt, gi, gq), rp[gi][1] = staged_row_params(sz, bt, gi, gq + 8);
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[s][r] = dequant2<false>(w, 4 * s + r, rp[kGroupsPerChunk > 1 ? 16 * s / kGroup : 0][r % 2]);
}

// The two A buffers of a warpgroup: registers, or sA (kASmem).
struct ABuffers {
  unsigned reg[2][kChunksPerStage][4][4];
  unsigned char* smem;  // this warpgroup's two stages of sA
};

// Writes lane (gq, t)'s dequantised registers of one chunk (a[s][r]: rows gq
// + 8(r%2) of warp tile w, physical k 16t + 2s + 8(r/2) + {0, 1}) to the
// warpgroup's sA chunk: row 16w + gq + 8h, k 16t .. 16t + 7 in piece 2t and
// 16t + 8 .. 16t + 15 in piece 2t + 1, each at its swizzled place (the row's
// r % 8 is gq). A store's 8 lanes of a phase (gq 0 or 1 × t) hit 8 distinct
// 16-byte bank groups.
__device__ __forceinline__ void store_a(unsigned char* chunk, int w, int lane, const unsigned (&a)[4][4]) {
  const int gq = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    unsigned char* row = chunk + (16 * w + gq + 8 * h) * 128;
    *reinterpret_cast<uint4*>(row + ((2 * t) ^ gq) * 16) = make_uint4(a[0][h], a[1][h], a[2][h], a[3][h]);
    *reinterpret_cast<uint4*>(row + ((2 * t + 1) ^ gq) * 16) = make_uint4(a[0][2 + h], a[1][2 + h], a[2][2 + h], a[3][2 + h]);
  }
}

// Stage `stage` (ring slot `at`) dequantised into A buffer B. Chunks past k
// are zeros: their wgmma still run (no branch around a wgmma, which ptxas
// would answer by serialising every wgmma, C7520). sA is made visible to the
// tensor cores, which read through the async proxy (the warpgroup's barrier
// before its wgmma completes the ordering).
//
// Only a split (kMine stages a block, the last past k) or a last stage with
// fewer chunks than kChunksPerStage has chunks past k. Elsewhere the check is
// left out: ptxas zeroed an A buffer for it (16 CS2R in the loop of two
// stages, in the SASS of the M = 64 winner, H100).
constexpr bool kMaybePastK = kSplit > 1 || kChunks % kChunksPerStage != 0;
template <int B>
__device__ __forceinline__ void dequant_stage(const uint4* at, int stage, int bt, int lane, ABuffers& a) {
#pragma unroll
  for (int kk = 0; kk < kChunksPerStage; ++kk) {
    unsigned scratch[4][4];  // sA: the registers only carry the values to the stores
    unsigned(&r)[4][4] = kASmem ? scratch : a.reg[B][kk];
    if (!kMaybePastK || stage * kChunksPerStage + kk < kChunks) {
      // (A in natural order: its scales and zeros from the stage's first chunk where they share a group.)
      if constexpr (kAQuad)
        dequant_lane_quad(at + kk * kChunkPieces, at + (kStageSharesGroup ? 0 : kk * kChunkPieces), bt, lane, r);
      else dequant_lane(at + kk * kChunkPieces, bt, lane, r);
    } else {
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) r[s][i] = 0;
    }
    if constexpr (kASmem) store_a(a.smem + B * kSaStage + kk * kSaBytes, bt % 4, lane, r);
  }
  if constexpr (kASmem) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Waits for the 128 threads of warpgroup g (named barrier 1 + g; 0 is the block's).
__device__ __forceinline__ void warpgroup_sync(int g) { asm volatile("bar.sync %0, 128;" ::"r"(1 + g) : "memory"); }

// The wgmma of one stage from A buffer B and sB slot `slot`.
template <int B>
__device__ __forceinline__ void multiply_stage(const ABuffers& a, const unsigned char* slot, float (&acc)[kAcc]) {
  const unsigned lo_b = smem_descriptor_lo(slot), lo_a = kASmem ? smem_descriptor_lo(a.smem + B * kSaStage) : 0u;
  qjit::static_for<kChunksPerStage * 4>([&](auto i_) {
    constexpr int i = decltype(i_)::value, kk = i / 4, s = i % 4;
    const unsigned long long desc_b = descriptor_at<kk * kSbBytes + 32 * s>(lo_b);
    if constexpr (kASmem)
      wgmma_k16<kBlockRows>(acc, descriptor_at<kk * kSaBytes + 32 * s>(lo_a), desc_b);
    else
      wgmma_k16<kBlockRows>(acc, a.reg[B][kk][s], desc_b);
  });
}

// One iteration with A buffer B (a compile-time index); `end` is one past
// the block's last stage.
template <int B, class CopyX>
__device__ __forceinline__ void iteration(int it, int end, bool mma, bool copier, const unsigned* __restrict__ qweight,
                                          const TS* __restrict__ scales, const void* __restrict__ zeros,
                                          int first_tile, int bt, int lane, uint4* ring, const unsigned char* sb,
                                          ABuffers& a, float (&acc)[kAcc], CopyX stage_x) {
  if (mma) {
    if constexpr (kASmem) warpgroup_sync(bt / 4);  // the warpgroup's stores of stage it into sA
    // Orders this warp's writes of the A registers (and accumulators) before the wgmma.
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    multiply_stage<B>(a, sb + (it % kStages) * kSbStage, acc);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    // Stage it - 1's wgmma of this warpgroup are done (its A buffer is
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
  if (mma && it + 1 < end) dequant_stage<1 - B>(ring + ((it + 1) % kStages) * kStagePieces, it + 1, bt, lane, a);
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

// --- one output tile's stages (every schedule) ----------------------------------

// Sums stages [begin, begin + count) of the output tile at rows m0 of x and
// block tile first_tile of n into acc. count is a compile-time constant for
// the grid schedules (inlined) and a run-time one for the stream schedule:
// ptxas takes a loop of run-time trip count around wgmma without serialising
// them (no C7520; checked by a CPU test).
__device__ __forceinline__ void accumulate_tile(const TX* __restrict__ x, const unsigned* __restrict__ qweight,
                                                const TS* __restrict__ scales, const void* __restrict__ zeros, int M,
                                                int m0, int first_tile, int begin, int count, bool mma, bool copier,
                                                int bt, int lane, uint4* ring, unsigned char* sb, float (&acc)[kAcc]) {
  const int end = begin + count;
  __syncthreads();  // the previous tile is done with the ring and sB
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  fence_acc(acc);

  ABuffers a;
  a.smem = sb + kStages * kSbStage + (bt / 4) * 2 * kSaStage;  // unused by the producer and without kASmem
  const auto stage_x = [&](int stage_index, int slot) {
    if constexpr (kASmem || kAQuad) copy_x_natural(x, m0, M, stage_index, sb + slot * kSbStage);
    else copy_x_permuted(x, m0, M, stage_index, sb + slot * kSbStage);
  };
  if (copier) {
    ring_prologue(qweight, scales, zeros, first_tile, begin, end, ring, stage_x);
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");  // stage `begin`
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (mma) dequant_stage<0>(ring + (begin % kStages) * kStagePieces, begin, bt, lane, a);

  // Unrolled by two so the A buffer index is a constant.
#pragma unroll 1
  for (int i = 0; i < count / 2; ++i) {
    iteration<0>(begin + 2 * i, end, mma, copier, qweight, scales, zeros, first_tile, bt, lane, ring, sb, a, acc, stage_x);
    iteration<1>(begin + 2 * i + 1, end, mma, copier, qweight, scales, zeros, first_tile, bt, lane, ring, sb, a, acc, stage_x);
  }
  if (count % 2 == 1)
    iteration<0>(end - 1, end, mma, copier, qweight, scales, zeros, first_tile, bt, lane, ring, sb, a, acc, stage_x);
  if (mma) asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  fence_acc(acc);
  if (copier) asm volatile("cp.async.wait_all;" ::: "memory");
}

// --- y through shared memory (kStageY; wq_stage_y.cuh) ------------------------

#include "qjit/wq_gemm/wq_stage_y.cuh"

// The epilogue of a whole output tile: warp bt's 16 rows of n × kBlockRows rows of x.
__device__ __forceinline__ void store_tile(const float (&acc)[kAcc], int tile, int m0, int M, int lane,
                                           const TX* __restrict__ bias, const TX* residual, TX* y, unsigned char* sb) {
  if constexpr (kStageY) {
    store_tile_staged(acc, tile, m0, M, lane, bias, y, sb);
    return;
  }
  if (tile >= kNTiles) return;
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    const float v[4] = {acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
    store_four(v, j, tile, m0, M, lane, bias, residual, y);
  }
}

// --- the stream schedule (kStream > 0; wq_stream_schedule.cuh) ---------------

#include "qjit/wq_gemm/wq_stream_schedule.cuh"

// --- warp specialisation (kWs) ----------------------------------------------------

#include "qjit/wq_gemm/wq_wgmma_ws.cuh"

// Calls fn(m0, first_tile, begin, count, p) for each output tile (or piece
// p of one, under the stream schedule) of this block, in the order both
// roles walk them.
template <class Fn>
__device__ __forceinline__ void for_each_tile(int M, Fn fn) {
  if constexpr (kStream > 0) {
    const StreamRun first = stream_run(M, 0);
#pragma unroll 1
    for (int p = 0; p < first.pieces; ++p) {  // none for a block without units
      const StreamRun r = stream_run(M, p);
      const int m_blocks = m_blocks_of(M);
      fn((r.piece.t % m_blocks) * kBlockRows, (r.piece.t / m_blocks) * kBlockTiles, r.piece.c0,
         r.piece.c1 - r.piece.c0, p);
    }
  } else {
#pragma unroll 1
    for (int m0 = blockIdx.x * kBlockRows; m0 < M; m0 += gridDim.x * kBlockRows)
      fn(m0, static_cast<int>(blockIdx.y) * kBlockTiles, 0, kIters, 0);
  }
}

// The warp-specialised kernel body. A template only so that other configs
// never compile its barriers and register moves.
template <bool kOn = kWs>
__device__ __forceinline__ void ws_run(const TX* __restrict__ x, const WsMaps& maps,
                                       const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
                                       const void* __restrict__ zeros,
                                       const TX* __restrict__ bias, const TX* residual, TX* y, int M,
                                       void* workspace, uint4* ring, unsigned char* sb, bool mma, int bt, int lane) {
  static_assert(kOn, "warp specialisation only");
  __shared__ __align__(8) unsigned long long barriers[2 * kStages];
  const WsBarriers bars{smem_address(barriers), smem_address(barriers + kStages)};
  if (threadIdx.x == 0) bars.init(kFullArrivals, kMmaThreads);
  QJIT_WS_BLOCK(0);
  __syncthreads();  // the barriers are initialised before anyone uses them
  unsigned seq = 0;  // the block's stages so far
  if (mma) {
    // Only now: waiting before the barrier above held the producer there too, so it could not copy
    // the first stages' weights while the previous grid ran out (they read nothing it writes).
    // Moving the wait here took 30 back-to-back launches from 47.9 to 46.2 us at 4096 × 11008,
    // M = 256, and from 24.8 to 23.1 us at M = 64 (H100, qjit_ws_probe).
    qjit::wait_for_previous_grid();
    if constexpr (kWsMovesRegisters) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kWsConsumerRegs));
    float acc[kAcc];
    for_each_tile(M, [&](int m0, int first_tile, int begin, int count, int p) {
      QJIT_WS_PIECE(p, 0, QJIT_WS_NOW());
      QJIT_WS_PIECE(p, 4, seq);
      QJIT_WS_PIECE(p, 5, count);
      ws_consume_tile(begin, count, seq, bt, lane, ring, sb, bars, acc);
      seq += count;
      QJIT_WS_PIECE(p, 1, QJIT_WS_NOW());
      if constexpr (kStream > 0) {
        const StreamRun r = stream_run(M, p);
        QJIT_WS_PIECE(p, 3, whole_tile(r) ? 0 : completes_tile(r) ? 2 : 1);
        finish_piece(r, p, true, M, lane, workspace, acc, bias, residual, y, sb,
                     [&](int first, int last, unsigned*, float (&sums)[kAcc]) {
                       ws_add_parts(first, last, seq, p, sb, bars, sums);
                     });
      } else {
        QJIT_WS_PIECE(p, 3, 0);
        store_tile(acc, first_tile + bt, m0, M, lane, bias, residual, y, sb);
      }
      QJIT_WS_PIECE(p, 2, QJIT_WS_NOW());
    });
    QJIT_WS_BLOCK(1);
  } else {
    QJIT_WS_START(8);
    if constexpr (kWsMovesRegisters) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kWsProducerRegs));
    QJIT_WS_START(10);
    if (kOneProducerThread && copy_thread() != 0) return;  // after the register move, which takes the whole warpgroup
    for_each_tile(M, [&](int m0, int first_tile, int begin, int count, int) {
      ws_produce_tile(x, maps, qweight, scales, zeros, M, m0, first_tile, begin, count, seq, ring, sb, bars);
      seq += count;
    });
    if constexpr (kStream > 0) ws_produce_parts(M, workspace, seq, sb, bars);
  }
}

extern "C" __global__ void QJIT_WQ_CLUSTER QJIT_WQ_BOUNDS
qjit_wq_gemm(const TX* __restrict__ x, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
             const void* __restrict__ zeros, const TX* __restrict__ bias, const TX* residual, TX* y, int M,
             void* workspace QJIT_WQ_TMA_PARAM) {
  // kStages × kStagePieces of ring, then from the next 1024-byte boundary
  // (the swizzle atoms' alignment; the host adds 1024 bytes) kStages slots of
  // sB and each warpgroup's two sA buffers.
  extern __shared__ __align__(128) uint4 ring[];
  const unsigned ring_end = static_cast<unsigned>(__cvta_generic_to_shared(ring + kStages * kStagePieces));
  unsigned char* sb = reinterpret_cast<unsigned char*>(ring + kStages * kStagePieces) + ((1024 - ring_end % 1024) % 1024);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bt = warp;  // the warp's tile in the block: warpgroup warp / 4, warp warp % 4 of it
  // Roles: every thread does both without a producer warpgroup.
  const bool mma = kProducer == 0 || __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0) < kGroups;
  const bool copier = kProducer == 0 || !mma;
  allow_next_grid();
  // The copiers wait inside ring_prologue (ws: ws_produce_tile), the warps that multiply here (ws: in
  // ws_run, past the barrier the producer waits at); y is written after.
  if (!copier && !kWs) qjit::wait_for_previous_grid();
  if constexpr (kWs) {
    ws_run(x, WsMaps{QJIT_WQ_TMA_ARG, QJIT_WQ_TMA_W_ARGS}, qweight, scales, zeros, bias, residual, y, M, workspace,
           ring, sb, mma, bt, lane);
    return;
  }
  float acc[kAcc];

  if constexpr (kStream > 0) {
    const StreamRun first = stream_run(M, 0);
    if (first.piece.t < 0) return;  // more blocks than units: this one has none
#pragma unroll 1
    for (int p = 0; p < first.pieces; ++p) {
      // Recomputed around the mainloop rather than kept: live across it, the
      // schedule cost the 256-row kernel its last registers (ptxas spilled).
      StreamRun r = stream_run(M, p);
      const int m_blocks = m_blocks_of(M);
      accumulate_tile(x, qweight, scales, zeros, M, (r.piece.t % m_blocks) * kBlockRows,
                      (r.piece.t / m_blocks) * kBlockTiles, r.piece.c0, r.piece.c1 - r.piece.c0, mma, copier, bt, lane,
                      ring, sb, acc);
      r = stream_run(M, p);
      finish_piece(r, p, mma, M, lane, workspace, acc, bias, residual, y, sb,
                   [&](int first, int last, unsigned* flag, float (&sums)[kAcc]) {
                     add_parts_from_l2(first, last, flag, mma, workspace, sums);
                   });
    }
    return;
  }

  const int first_tile = blockIdx.y * kBlockTiles;
  // This block's kMine stages of k, from `begin`: the z-th of kSplit equal
  // ranges. The last may run past kIters; those stages hold zeros, so every
  // block of a cluster runs the same number of iterations.
  constexpr int kMine = (kIters + kSplit - 1) / kSplit;
  const int begin = blockIdx.z * kMine;
  // Every bucket but 1024 covers M in one pass; 1024 loops over any M.
  for (int m0 = blockIdx.x * kBlockRows; m0 < M; m0 += gridDim.x * kBlockRows) {
    accumulate_tile(x, qweight, scales, zeros, M, m0, first_tile, begin, kMine, mma, copier, bt, lane, ring, sb, acc);
    const int tile = first_tile + bt;
    if constexpr (kSplit == 1) {
      if (mma) store_tile(acc, tile, m0, M, lane, bias, residual, y, sb);
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
