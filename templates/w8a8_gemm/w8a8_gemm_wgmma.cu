// w8a8_gemm for large M on Hopper's warpgroup tensor-core instruction
// (wgmma s8·s8 → s32, or with kFp8 e4m3·e4m3 → f32; sm_90a): the contract
// and plan of w8a8_gemm_tiled.cu (the quantization kernel of
// w8a8_quant_a.cuh writes x's codes and block parameters to the plan's
// workspace first). How it works and why: docs/w8a8_gemm.md, "The wgmma
// family" and "The e4m3 wgmma kernel".
//
// The product is formed transposed, yᵀ = W·codesᵀ: wgmma's A is 64 rows of
// W's codes (n), its B kBM rows of x's codes (m, wgmma's N). Both are
// K-major [rows][k] in global memory, which is what s8 and e4m3 wgmma
// require of both operands. Per accumulator a thread then holds 2 rows of n
// and kBM / 4 rows of m, so W's per-column terms (cB = sB·ΣB + K_i·oB) are
// formed for 2 values of n per block, not kBM / 4.
//
// Block: one producer warpgroup (the last) and two consumer warpgroups;
// consumer g owns n0 + 64g .. n0 + 64g + 63 (kTileN = 128 columns of y per
// block) × m0 .. m0 + kBM - 1. Tiles are numbered with m fastest (the blocks
// running together share W's tile in L2); block b takes tiles b, b +
// gridDim.x, ...: one tile a block, or a persistent grid of one block per SM.
//
// Ring: kStages slots, each one stage of 128 codes of k (kStageK):
//   W's codes   [kTileN][128]  16 KB, 128-byte swizzle (a tensor-map box)
//   x's codes   [kBM][128]     kBM·128 bytes, the same (a box from the workspace)
//   parameters  x's scale, offset, sum [kBM], then W's [kTileN] (float;
//               sums as int bits), bulk copies, on a block's last stage only
//               (e4m3: x's scales [kBM] alone; W's one scale of the block's
//               128 × 128 tile is a load of each consumer thread)
// Each slot has a full mbarrier (the producer's arrive.expect_tx of all the
// stage's bytes, made before its copies) and an empty one (one arrival per
// consumer thread once its wgmma of the slot are done and its promotion has
// read the parameters). Stage q of the block (counted over all its tiles)
// uses slot q % kStages in phase (q / kStages) & 1 of both.
//
// Consumer, per quantization block of kBlock codes (kStagesPerBlock stages):
// 4 wgmma.m64n<kBM>k32 per stage into the block's accumulators (int32, or
// fp32 for e4m3; scale-d 0 on the block's first step, so nothing clears
// them), then wgmma.wait_group 0 and the promotion of w8a8_combine.cuh,
// element by element, into the float accumulators: acc += sA·(sB·Cq + oB·ΣA)
// + oA·cB, or for e4m3 acc += fl(sA·sW)·P, the tiled kernel's arithmetic
// exactly. While one consumer promotes, the other's wgmma keep the tensor
// cores busy (the scheme DeepGEMM uses for FP8 with 1×128 scales). The FP8
// tensor cores keep about 14 bits of their sum (docs/w8a8_gemm.md): the
// promotion after each 128 of k is what bounds that rounding.
//
// With kOverlap a consumer also overlaps its own promotion with its next
// block's wgmma (below, "overlapped blocks").
//
// No wgmma sits behind a run-time branch (ptxas would serialise every wgmma
// of the kernel, info C7520): the loops have run-time trip counts only, and
// the roles branch on a shuffled warpgroup index, provably warp-uniform.
using namespace qjit_spec;
#include "qjit/w8a8_gemm/w8a8_quant_a.cuh"
#include "qjit/w8a8_gemm/w8a8_combine.cuh"
#include "qjit/w8a8_gemm/w8a8_wgmma_instr.cuh"

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "w8a8_gemm's wgmma family needs the sm_90a target (compute capability 9.0)"
#endif

using qjit::bulk_load;
using qjit::descriptor_at;
using qjit::mbarrier_arrive;
using qjit::mbarrier_arrive_expect_bytes;
using qjit::mbarrier_try_wait;
using qjit::smem_address;
using qjit::smem_descriptor_lo;
using qjit::tma_load_box;
using qjit::TensorMapParam;

constexpr int kConsumers = 2;
constexpr int kMmaThreads = 128 * kConsumers;
constexpr int kThreads = kMmaThreads + 128;  // and the producer warpgroup
constexpr int kTileN = 64 * kConsumers;      // columns of y (rows of W) per block
constexpr int kNTiles = (kN + kTileN - 1) / kTileN;
constexpr int kStageK = 128;  // codes of k per stage: one 128-byte swizzled row of each operand
constexpr int kStagesPerBlock = kBlock / kStageK;
constexpr int kKStages = kK / kStageK;  // stages per tile
constexpr int kWBytes = kTileN * kStageK;
constexpr int kXBytes = kBM * kStageK;
// A slot's parameters: x's scale, offset and sum per row and W's per column;
// e4m3 x's scale per row only.
constexpr int kParamFloats = kFp8 ? kBM : 3 * (kBM + kTileN);
constexpr int kSlotBytes = kWBytes + kXBytes + (4 * kParamFloats + 1023) / 1024 * 1024;  // slots stay 1024-aligned
constexpr int kAcc = kBM / 2;  // accumulators per consumer thread (block's and float each): 64 × kBM / 128
using Part = W8a8Part;         // a block's accumulators: int32 (int8 codes) or fp32 (e4m3)
static_assert(kBlock % kStageK == 0 && kK % kStageK == 0, "a block is whole stages (codegen/ops/w8a8_gemm.cpp)");
static_assert(kBM == 64 || kBM == 128 || kBM == 192, "wgmma n of 64, 128 or 192");
static_assert(kN % 16 == 0 && kParamRows % 64 == 0, "parameter runs of whole 16-byte pieces");
static_assert(kStages >= 2, "a ring");
static_assert(!kOverlap || (kStages >= 2 * kStagesPerBlock && kBM <= 128),
              "two blocks in flight: their stages in the ring, 3·kAcc accumulators a thread (codegen)");
// e4m3: a block's kTileN columns lie in one 128-column tile of W's scales.
static_assert(!kFp8 || (kBlock == 128 && kN % kTileN == 0 && kTileN == 128), "e4m3 tiles (codegen/ops/w8a8_gemm.cpp)");

// Register split (setmaxnreg, sm_90a): the producer's single copying thread
// needs few; the consumers hold 2·kAcc accumulators (either form). 384 threads at the
// entry cap of 168 (65536 / 384, to a multiple of 8) give a pool of 64512:
// 128·40 + 256·232 exactly. Asking for more than the producer frees would
// make setmaxnreg.inc wait forever.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(128 * kProducerRegs + kMmaThreads * kConsumerRegs <= kThreads * (65536 / kThreads / 8 * 8),
              "the consumers take no more registers than the producer gives back");

struct Tile {
  int m0, n0;
};
// The block's i-th tile, m fastest.
__device__ __forceinline__ Tile tile_of(int i, int m_tiles) {
  const int t = static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x);
  return {(t % m_tiles) * kBM, (t / m_tiles) * kTileN};
}

// The ring: kStages slots of kSlotBytes and their barriers (qjit_sm90.cuh).
struct Ring : qjit::StageBarriers<kStages> {
  unsigned char* slots;
  __device__ __forceinline__ unsigned char* slot(unsigned q) const { return slots + (q % kStages) * kSlotBytes; }
};
using qjit::mbarrier_wait_or_trap;

struct Operands {
  const float *a_scale, *a_offset;
  const int* a_sum;
  const signed char* wq;
  const float *w_scale, *w_offset;
  const int* w_sum;
  const TensorMapParam *w_map, *x_map;
};

// --- producer (one thread) -------------------------------------------------------

// Rows of x and columns of W whose parameters a tile's block copies: the
// tile's, cut at the ends of the arrays (x's have kParamRows rows, W's kN
// columns); the slot's rest keeps stale values that reach only rows and
// columns of y never stored.
__device__ __forceinline__ unsigned x_param_rows(const Tile& t) { return min(kBM, kParamRows - t.m0); }
__device__ __forceinline__ unsigned w_param_cols(const Tile& t) { return min(kTileN, kN - t.n0); }

// Bytes stage kt of tile t brings: both boxes (counted whole, rows past the
// tensor included), and on a block's last stage the parameter runs (e4m3:
// x's scales only).
__device__ __forceinline__ unsigned stage_bytes(const Tile& t, int kt) {
  unsigned bytes = kWBytes + kXBytes;
  if ((kt + 1) % kStagesPerBlock == 0)
    bytes += 4 * x_param_rows(t) * (1 + kOffsetA + kOffsetW) + (kFp8 ? 0u : 4 * w_param_cols(t) * (1 + kOffsetW + kOffsetA));
  return bytes;
}

// W's part of stage kt of tile t (weights only: no kernel writes them, so
// the first stages' go before the wait for the previous grid).
__device__ __forceinline__ void copy_w(const Operands& op, const Tile& t, int kt, unsigned char* slot, unsigned full) {
  tma_load_box(smem_address(slot), op.w_map, kt * kStageK, t.n0, full);
  // (e4m3: W's tile scale is not in the slot: the run [kt / kStagesPerBlock][n0 / 128] is one float, under
  // the 16 bytes a bulk copy moves, and its neighbours may lie past the array's end.)
  if (kFp8 || (kt + 1) % kStagesPerBlock != 0) return;
  const unsigned pw = smem_address(slot + kWBytes + kXBytes) + 12 * kBM;
  const long long at = static_cast<long long>(kt / kStagesPerBlock) * kN + t.n0;
  const unsigned bytes = 4 * w_param_cols(t);
  bulk_load(pw, op.w_scale + at, bytes, full);
  if constexpr (kOffsetW) bulk_load(pw + 4 * kTileN, op.w_offset + at, bytes, full);
  if constexpr (kOffsetA) bulk_load(pw + 8 * kTileN, op.w_sum + at, bytes, full);
}

// x's part of stage kt of tile t (the quantization kernel's output).
__device__ __forceinline__ void copy_x(const Operands& op, const Tile& t, int kt, unsigned char* slot, unsigned full) {
  tma_load_box(smem_address(slot + kWBytes), op.x_map, kt * kStageK, t.m0, full);
  if ((kt + 1) % kStagesPerBlock != 0) return;
  const unsigned pa = smem_address(slot + kWBytes + kXBytes);
  const long long at = static_cast<long long>(kt / kStagesPerBlock) * kParamRows + t.m0;
  const unsigned bytes = 4 * x_param_rows(t);
  bulk_load(pa, op.a_scale + at, bytes, full);
  if constexpr (kOffsetA) bulk_load(pa + 4 * kBM, op.a_offset + at, bytes, full);
  if constexpr (kOffsetW) bulk_load(pa + 8 * kBM, op.a_sum + at, bytes, full);
}

// Every stage of the block's tiles, in order. The stages the empty ring
// takes first announce their bytes and copy W before the wait for the
// previous grid (under PDL they stream while the quantization kernel ends),
// their x after it.
__device__ __forceinline__ void produce(const Operands& op, int m_tiles, int tiles, const Ring& ring) {
  const int block = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  const int mine = block < tiles ? (tiles - 1 - block) / blocks + 1 : 0;  // tiles block, block + blocks, ...
  const unsigned total = static_cast<unsigned>(mine) * kKStages;
  const unsigned head = min(total, static_cast<unsigned>(kStages));
#pragma unroll 1
  for (unsigned q = 0; q < head; ++q) {
    const Tile t = tile_of(static_cast<int>(q / kKStages), m_tiles);
    const int kt = static_cast<int>(q % kKStages);
    mbarrier_arrive_expect_bytes(ring.full_of(q), stage_bytes(t, kt));
    copy_w(op, t, kt, ring.slot(q), ring.full_of(q));
  }
  qjit::wait_for_previous_grid();
#pragma unroll 1
  for (unsigned q = 0; q < head; ++q)
    copy_x(op, tile_of(static_cast<int>(q / kKStages), m_tiles), static_cast<int>(q % kKStages), ring.slot(q),
           ring.full_of(q));
#pragma unroll 1
  for (unsigned q = head; q < total; ++q) {
    const Tile t = tile_of(static_cast<int>(q / kKStages), m_tiles);
    const int kt = static_cast<int>(q % kKStages);
    mbarrier_wait_or_trap(ring.empty_of(q), Ring::phase_of(q - kStages));
    // The consumers read the slot's parameters with ordinary loads (the
    // generic proxy) before their arrival; the copies below write through
    // the async proxy, which only a proxy fence orders after those reads
    // (a race wq_gemm's ring once showed without it: docs/wq_gemm_wgmma.md).
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    mbarrier_arrive_expect_bytes(ring.full_of(q), stage_bytes(t, kt));
    copy_w(op, t, kt, ring.slot(q), ring.full_of(q));
    copy_x(op, t, kt, ring.slot(q), ring.full_of(q));
  }
}

// --- consumers ---------------------------------------------------------------------

// The 4 steps of 32 k of the stage in `slot` (consumer g's 64 rows of W, all
// kBM rows of x); scale-d 0 on the first step of a block's first stage.
// A step's 32 k are 32 bytes of each 128-byte row for both code types.
template <bool kFirstOfBlock>
__device__ __forceinline__ void multiply_stage(const unsigned char* slot, int g, Part (&part)[kAcc]) {
  const unsigned a = smem_descriptor_lo(slot + g * 64 * kStageK), b = smem_descriptor_lo(slot + kWBytes);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  wgmma_k32<kBM>(part, descriptor_at<0>(a), descriptor_at<0>(b), kFirstOfBlock ? 0 : 1);
  wgmma_k32<kBM>(part, descriptor_at<32>(a), descriptor_at<32>(b), 1);
  wgmma_k32<kBM>(part, descriptor_at<64>(a), descriptor_at<64>(b), 1);
  wgmma_k32<kBM>(part, descriptor_at<96>(a), descriptor_at<96>(b), 1);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// acc += the block's promoted products (int8). Accumulator 4j + e of lane
// (gq, t) in warp w of consumer g: n = 64g + 16w + gq + 8(e / 2), m = 8j +
// 2t + e % 2 of the tile; parameters from the slot of the block's last
// stage. (The last argument, e4m3's W tile scale, is not used here.)
__device__ __forceinline__ void promote(const unsigned char* slot, int g, int lane, const int (&part)[kAcc],
                                        float (&acc)[kAcc], float) {
  const float* pa = reinterpret_cast<const float*>(slot + kWBytes + kXBytes);  // x: scale, offset, sum [kBM]
  const float* pw = pa + 3 * kBM;                                               // W: scale, offset, sum [kTileN]
  const int w = (static_cast<int>(threadIdx.x) / 32) % 4, gq = lane / 4, t = lane % 4;
  W8a8ColParams col[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int c = 64 * g + 16 * w + gq + 8 * h;
    col[h] = w8a8_col_params(pw[c], kOffsetW ? pw[kTileN + c] : 0.0f, kOffsetA ? __float_as_int(pw[2 * kTileN + c]) : 0);
  }
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    const int r = 8 * j + 2 * t;  // rows r and r + 1: one 8-byte load per parameter
    const float2 scale = *reinterpret_cast<const float2*>(pa + r);
    const float2 offset = kOffsetA ? *reinterpret_cast<const float2*>(pa + kBM + r) : make_float2(0.0f, 0.0f);
    const float2 sum = kOffsetW ? *reinterpret_cast<const float2*>(pa + 2 * kBM + r) : make_float2(0.0f, 0.0f);
    const W8a8RowParams row[2] = {
        {scale.x, offset.x, kOffsetW ? static_cast<float>(__float_as_int(sum.x)) : 0.0f},
        {scale.y, offset.y, kOffsetW ? static_cast<float>(__float_as_int(sum.y)) : 0.0f}};
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[4 * j + e] = w8a8_add_block(acc[4 * j + e], part[4 * j + e], row[e % 2], col[e / 2]);
  }
}

// e4m3: acc += fl(sA·sW)·P (w8a8_add_fp8_block). All of the thread's
// columns share sW, the scale of W's 128 × 128 tile for this block (the
// tile's 128 columns are one tile of W's scales); sA is per row: accumulator
// 4j + e is row m = 8j + 2t + e % 2, from the slot's x scales [kBM].
__device__ __forceinline__ void promote(const unsigned char* slot, int, int lane, const float (&part)[kAcc],
                                        float (&acc)[kAcc], float sw) {
  const float* pa = reinterpret_cast<const float*>(slot + kWBytes + kXBytes);  // x's scales [kBM]
  const int t = lane % 4;
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    const float2 sa = *reinterpret_cast<const float2*>(pa + 8 * j + 2 * t);  // rows 8j + 2t and + 1: one 8-byte load
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[4 * j + e] = w8a8_add_fp8_block(acc[4 * j + e], part[4 * j + e], e % 2 ? sa.y : sa.x, sw);
  }
}

// One quantization block of a tile: its stages multiplied into part, then
// promoted into acc, every slot released. q: the block's first stage;
// w_scale_at (e4m3 only): where W's scale of the block and the tile's
// columns is in w_scale [kBlocks][kWScaleCols].
__device__ __forceinline__ void consume_block(const Ring& ring, unsigned q, int g, int lane, Part (&part)[kAcc],
                                              float (&acc)[kAcc], const float* __restrict__ w_scale, int w_scale_at) {
  // Loaded before the block's wgmma are issued and used after they complete, so its latency hides behind
  // them (an L2 hit: every block of the tile's column reads it).
  const float sw = kFp8 ? __ldg(w_scale + w_scale_at) : 0.0f;
  qjit::static_for<kStagesPerBlock>([&](auto s_) {
    constexpr int s = decltype(s_)::value;
    mbarrier_wait_or_trap(ring.full_of(q + s), Ring::phase_of(q + s));
    multiply_stage<s == 0>(ring.slot(q + s), g, part);
    if constexpr (s + 1 < kStagesPerBlock) {
      // The previous stage's wgmma are done: its slot is free (its
      // parameters, if any, belong to an earlier block).
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      if constexpr (s > 0) mbarrier_arrive(ring.empty_of(q + s - 1));
    } else {
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      if constexpr (s > 0) mbarrier_arrive(ring.empty_of(q + s - 1));
      fence_accumulators(part);
      promote(ring.slot(q + s), g, lane, part, acc, sw);
      mbarrier_arrive(ring.empty_of(q + s));  // after the promotion's reads of the slot's parameters
    }
  });
}

// --- overlapped blocks (kOverlap) -----------------------------------------------
//
// consume_block waits for a block's own wgmma before promoting it, so a
// consumer's tensor-core work stops while it promotes (the other consumer's
// may run). With kOverlap each consumer keeps two sets of block
// accumulators: it issues block b + 1's wgmma into one set, then waits only
// for block b's (wgmma.wait_group kStagesPerBlock: b + 1's groups may stay
// in flight) and promotes b's set while b + 1's run. The ring must then hold
// two blocks' stages at once (kStages ≥ 2·kStagesPerBlock, codegen) and a
// thread 3·kAcc accumulators (codegen offers it at kBM = 64: at 128 ptxas
// spills).

template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Block q's stages: each waited for, then its 4 wgmma issued into part.
__device__ __forceinline__ void issue_block(const Ring& ring, unsigned q, int g, Part (&part)[kAcc]) {
  qjit::static_for<kStagesPerBlock>([&](auto s_) {
    constexpr int s = decltype(s_)::value;
    mbarrier_wait_or_trap(ring.full_of(q + s), Ring::phase_of(q + s));
    multiply_stage<s == 0>(ring.slot(q + s), g, part);
  });
}

// Block q, its wgmma complete: its slots released (the last once the
// promotion has read its parameters) and its sums promoted into acc.
__device__ __forceinline__ void finish_block(const Ring& ring, unsigned q, int g, int lane, Part (&part)[kAcc],
                                             float (&acc)[kAcc], float sw) {
  qjit::static_for<kStagesPerBlock - 1>([&](auto s_) { mbarrier_arrive(ring.empty_of(q + decltype(s_)::value)); });
  fence_accumulators(part);
  promote(ring.slot(q + kStagesPerBlock - 1), g, lane, part, acc, sw);
  mbarrier_arrive(ring.empty_of(q + kStagesPerBlock - 1));
}

// Blocks per run: the largest divisor of kBlocks up to 8. ptxas keeps a
// consumer's wgmma in flight while it promotes only in straight-line code:
// with a block still in flight across a loop's back edge it serialises
// every wgmma of the kernel (info C7514). So a run of kOverlapRun blocks is
// unrolled, and only its last block's promotion waits for nothing else.
constexpr int overlap_run() {
  for (int d = 8; d > 1; --d)
    if (kBlocks % d == 0) return d;
  return 1;
}
constexpr int kOverlapRun = overlap_run();

// A tile's blocks, kOverlapRun at a time: within a run, block r + 1's wgmma
// are issued (into the other set, p0 and p1 alternating) before block r is
// promoted. q advances by the tile's stages; no wgmma sits behind a run-time
// branch (the run loop's trip count is the only one).
__device__ __forceinline__ void consume_tile_overlapped(const Ring& ring, unsigned& q, int g, int lane,
                                                        Part (&p0)[kAcc], Part (&p1)[kAcc], float (&acc)[kAcc],
                                                        const float* __restrict__ w_scale, int tile_n0) {
  const auto sw_of = [&](int blk) { return kFp8 ? __ldg(w_scale + blk * kWScaleCols + tile_n0 / 128) : 0.0f; };
#pragma unroll 1
  for (int run = 0; run < kBlocks; run += kOverlapRun) {
    float sw[kOverlapRun];
#pragma unroll
    for (int r = 0; r < kOverlapRun; ++r) sw[r] = sw_of(run + r);
    issue_block(ring, q, g, p0);
    qjit::static_for<kOverlapRun>([&](auto r_) {
      constexpr int r = decltype(r_)::value;
      Part(&cur)[kAcc] = r % 2 ? p1 : p0;
      Part(&next)[kAcc] = r % 2 ? p0 : p1;
      if constexpr (r + 1 < kOverlapRun) {
        issue_block(ring, q + (r + 1) * kStagesPerBlock, g, next);
        wgmma_wait<kStagesPerBlock>();  // block r's groups done; r + 1's may run
      } else {
        wgmma_wait<0>();
      }
      finish_block(ring, q + r * kStagesPerBlock, g, lane, cur, acc, sw[r]);
    });
    q += kOverlapRun * kStagesPerBlock;
  }
}

// 16-bit y: each 8 × 8 of (n, m) transposed by movmatrix (PTX ISA,
// "movmatrix"), so lane (gq, t) holds y[m = 8j + gq][n = 2t, 2t + 1] of its
// warp's 8 columns: 4-byte stores of two adjacent columns of a row.
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  const TX a = qjit::from_f32<TX>(lo), b = qjit::from_f32<TX>(hi);
  return static_cast<unsigned>(*reinterpret_cast<const unsigned short*>(&a)) |
         static_cast<unsigned>(*reinterpret_cast<const unsigned short*>(&b)) << 16;
}

// The tile's y: + bias[n], the clamp, y's type; rows past M and columns
// past kN are never stored.
__device__ __forceinline__ void store_tile(const float (&acc)[kAcc], const Tile& tile, int M, int g, int lane,
                                           const TX* __restrict__ bias, TX* __restrict__ y) {
  const int w = (static_cast<int>(threadIdx.x) / 32) % 4, gq = lane / 4, t = lane % 4;
  const int n8 = tile.n0 + 64 * g + 16 * w;  // the warp's first column; its 16 columns are all in or all out (kN % 16 == 0)
  if (n8 >= kN) return;
  float b[2] = {0.0f, 0.0f};
  if constexpr (kBias) b[0] = qjit::to_f32(bias[n8 + gq]), b[1] = qjit::to_f32(bias[n8 + gq + 8]);
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float v0 = w8a8_finish_value(acc[4 * j + 2 * h], b[h]), v1 = w8a8_finish_value(acc[4 * j + 2 * h + 1], b[h]);
      if constexpr (sizeof(TX) == 2) {
        unsigned v = pack2(v0, v1);
        asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(v) : "r"(v));
        const int m = tile.m0 + 8 * j + gq;
        if (m < M) *reinterpret_cast<unsigned*>(y + static_cast<long long>(m) * kN + n8 + 8 * h + 2 * t) = v;
      } else {
        const int m = tile.m0 + 8 * j + 2 * t, n = n8 + gq + 8 * h;
        if (m < M) y[static_cast<long long>(m) * kN + n] = qjit::from_f32<TX>(v0);
        if (m + 1 < M) y[static_cast<long long>(m + 1) * kN + n] = qjit::from_f32<TX>(v1);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_w8a8_gemm(const signed char* __restrict__ codes, const float* __restrict__ a_scale,
               const float* __restrict__ a_offset, const int* __restrict__ a_sum, const signed char* __restrict__ wq,
               const float* __restrict__ w_scale, const float* __restrict__ w_offset, const int* __restrict__ w_sum,
               const TX* __restrict__ bias, TX* __restrict__ y, int M, const __grid_constant__ TensorMapParam w_map,
               const __grid_constant__ TensorMapParam x_map) {
  // The ring from the first 1024-byte boundary of dynamic shared memory (the
  // swizzle atoms' alignment; the host adds 1024 bytes).
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  __shared__ __align__(8) unsigned long long barriers[2 * kStages];
  const unsigned base = smem_address(dynamic_smem);
  const Ring ring{{smem_address(barriers), smem_address(barriers + kStages)}, dynamic_smem + (1024 - base % 1024) % 1024};
  (void)codes;  // read through x_map
  (void)wq;     // read through w_map
  if (threadIdx.x == 0) ring.init(1, kMmaThreads);
  __syncthreads();  // the barriers are initialised before anyone uses them
  qjit::allow_next_grid();  // the next grid waits for this one's completion before it touches anything

  const int m_tiles = (M + kBM - 1) / kBM, tiles = m_tiles * kNTiles;
  const int lane = threadIdx.x % 32;
  // The role, from a shuffled (so provably warp-uniform) warpgroup index: wgmma may not sit behind a
  // branch ptxas cannot prove uniform.
  const int g = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (g == kConsumers) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
    if (threadIdx.x != kMmaThreads) return;  // one thread copies (after the register move, which takes the warpgroup)
    const Operands op{a_scale, a_offset, a_sum, wq, w_scale, w_offset, w_sum, &w_map, &x_map};
    produce(op, m_tiles, tiles, ring);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  qjit::wait_for_previous_grid();  // y is written after it (the producer waits before reading the codes)
  Part part[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) part[i] = 0;  // defined values for the first wgmma's operands (scale-d 0 ignores them)
  unsigned q = 0;  // the block's stages so far
#pragma unroll 1
  for (int i = 0; static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x) < tiles; ++i) {
    const Tile tile = tile_of(i, m_tiles);
    float acc[kAcc];
#pragma unroll
    for (int a = 0; a < kAcc; ++a) acc[a] = 0.0f;
    if constexpr (kOverlap) {
      Part spare[kAcc];  // the second set of block accumulators
#pragma unroll
      for (int a = 0; a < kAcc; ++a) spare[a] = 0;
      consume_tile_overlapped(ring, q, g, lane, part, spare, acc, w_scale, tile.n0);
    } else {
#pragma unroll 1
      for (int blk = 0; blk < kBlocks; ++blk, q += kStagesPerBlock)
        consume_block(ring, q, g, lane, part, acc, w_scale, blk * kWScaleCols + tile.n0 / 128);
    }
    store_tile(acc, tile, M, g, lane, bias, y);
  }
}
