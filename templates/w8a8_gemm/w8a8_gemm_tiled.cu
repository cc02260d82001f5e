// w8a8_gemm on the int8 tensor cores (mma.sync m16n8k32 s8·s8 → s32, sm_80+),
// or with kFp8 on the FP8 ones (m16n8k32 e4m3·e4m3 → f32, sm_89+):
// y[m][n] = clamp(Σ_blocks promote(Cq) + bias[n]) with the codes of x from
// the quantization kernel (w8a8_quant_a.cuh) and W's codes [kN][kK]. Both
// codes are one byte and share the fragment layouts (PTX ISA, "Matrix
// Fragments for mma.m16n8k32": one figure for .s8/.u8/.e4m3/.e5m2), so the
// ring, the swizzle and the ldmatrix loads are the same; the accumulators
// (int32, or fp32 per block) and the promotion differ.
//
// Block: kBM rows × kBN columns of y, kWarpsM × kWarpsN warps of kWM × kWN.
// blockIdx.x runs over rows (fastest, so the blocks running together share
// W's tiles in L2), blockIdx.y over columns.
//
// Pipeline: a ring of kStages stages in dynamic shared memory filled by
// cp.async (16 bytes each); stage of k-tile kt holds
//   A codes [kBM][kBK], B codes [kBN][kBK], rows of kBK bytes swizzled (below);
//   then, when kt is the last k-tile of its quantization block, the block's
//   parameters: A's scale, offset, sum for kBM rows, W's for kBN columns
//   (e4m3: A's scales, and W's scales of the kWTiles 128-column tiles).
// kBK divides kBlock, so a block ends with a k-tile: after multiplying that
// tile every warp promotes its int32 sums to its float accumulators with the
// parameters of the same stage (w8a8_combine.cuh) and clears them. No int32
// matrix leaves the registers and nothing is added atomically. The e4m3
// tensor cores accumulate with fewer bits than fp32 (docs/w8a8_gemm.md):
// a block's 128 products go through 4 mma steps before the promotion, as
// DeepGEMM promotes every 128 of k.
using namespace qjit_spec;
#include "qjit/w8a8_gemm/w8a8_quant_a.cuh"
#include "qjit/w8a8_gemm/w8a8_combine.cuh"
#include "qjit/w8a8_gemm/w8a8_mma.cuh"

constexpr int kWarps = kWarpsM * kWarpsN;
constexpr int kThreads = 32 * kWarps;
constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;  // a warp's rows and columns
constexpr int kMI = kWM / 16, kNI = kWN / 8;              // its mma tiles (m16 × n8)
constexpr int kRowChunks = kBK / 16;                      // 16-byte pieces per staged row
constexpr int kABytes = kBM * kBK, kBBytes = kBN * kBK;
constexpr int kParamBytes = 12 * kBM + 12 * kBN;
constexpr int kStageBytes = kABytes + kBBytes + kParamBytes;
constexpr int kTilesPerBlock = kBlock / kBK;
constexpr int kKTiles = kK / kBK;
static_assert(kBlock % kBK == 0 && kWM % 16 == 0 && kWN % 16 == 0, "tile legality (codegen/ops/w8a8_gemm.cpp)");
static_assert(kStageBytes % 16 == 0, "stages stay 16-byte aligned");
// e4m3: the 128-column tiles of W's scales a block's kBN columns span (n0 is a
// multiple of kBN, and kBN of 128 or a divisor of it).
constexpr int kWTiles = kBN > 128 ? kBN / 128 : 1;
static_assert(!kFp8 || (kBlock == 128 && (kBN % 128 == 0 || 128 % kBN == 0)), "e4m3 tiles (codegen/ops/w8a8_gemm.cpp)");

using Part = W8a8Part;

// Swizzle: piece c of staged row r sits at piece c ^ f(r). ldmatrix reads
// one piece of 8 consecutive rows; f spreads those 8 pieces over the 8
// distinct 16-byte bank groups of a 128-byte line whatever the row length
// (rows of 128 bytes: f = r mod 8; of 64: two rows per line, f = (r / 2) mod 4;
// of 32: four rows per line, f = (r / 4) mod 2).
__device__ __forceinline__ int swizzled(int r, int c) {
  return r * kBK + ((c ^ ((r / (8 / kRowChunks)) % kRowChunks)) * 16);
}

using qjit::ldmatrix_x4;
using qjit::smem_address;
using qjit::cp_async16;
// 4 bytes global → shared.
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_address(dst)), "l"(src) : "memory");
}

// `count` floats (a multiple of 4) from src to dst, 16 bytes per thread and pass.
__device__ __forceinline__ void copy_floats(void* dst, const void* src, int count) {
  for (int i = threadIdx.x; i < count / 4; i += kThreads)
    cp_async16(static_cast<char*>(dst) + 16 * i, static_cast<const char*>(src) + 16 * i);
}

// W's part of k-tile kt (codes of columns n0.., and W's block parameters on
// a block's last k-tile) into `stage`: weights only, which no kernel writes,
// so the prologue queues them before griddepcontrol.wait.
__device__ __forceinline__ void load_stage_w(const W8a8Operands& op, int n0, int kt, unsigned char* stage) {
  if (kt >= kKTiles) return;
  const long long k0 = static_cast<long long>(kt) * kBK;
  for (int i = threadIdx.x; i < kBN * kRowChunks; i += kThreads) {
    const int r = i / kRowChunks, c = i % kRowChunks;
    cp_async16(stage + kABytes + swizzled(r, c), op.wq + static_cast<long long>(n0 + r) * kK + k0 + 16 * c);
  }
  if ((kt + 1) % kTilesPerBlock == 0) {
    float* pb = reinterpret_cast<float*>(stage + kABytes + kBBytes) + 3 * kBM;
    if constexpr (kFp8) {
      if (threadIdx.x < kWTiles)
        cp_async4(pb + threadIdx.x, op.w_scale + static_cast<long long>(kt / kTilesPerBlock) * kWScaleCols + n0 / 128 +
                                        threadIdx.x);
      return;
    }
    const long long rw = static_cast<long long>(kt / kTilesPerBlock) * kN + n0;
    copy_floats(pb, op.w_scale + rw, kBN);
    if (kOffsetW) copy_floats(pb + kBN, op.w_offset + rw, kBN);
    if (kOffsetA) copy_floats(pb + 2 * kBN, op.w_sum + rw, kBN);
  }
}

// x's part of k-tile kt (codes of rows m0.., and their block parameters on a
// block's last k-tile) into `stage`, written by the quantization kernel.
__device__ __forceinline__ void load_stage_x(const W8a8Operands& op, int m0, int M, int kt, unsigned char* stage) {
  if (kt >= kKTiles) return;
  const long long k0 = static_cast<long long>(kt) * kBK;
  for (int i = threadIdx.x; i < kBM * kRowChunks; i += kThreads) {
    const int r = i / kRowChunks, c = i % kRowChunks;
    const bool real = m0 + r < M;  // rows past M arrive as zeros
    const signed char* src = op.codes + (real ? (static_cast<long long>(m0 + r) * kK + k0 + 16 * c) : 0);
    cp_async16(stage + swizzled(r, c), src, real ? 16 : 0);
  }
  if ((kt + 1) % kTilesPerBlock == 0) {
    // A's arrays have kParamRows ≥ m0 + kBM rows (padded to 128); rows past
    // M hold whatever is there and only ever reach rows of y not stored.
    float* pa = reinterpret_cast<float*>(stage + kABytes + kBBytes);
    const long long ra = static_cast<long long>(kt / kTilesPerBlock) * kParamRows + m0;
    copy_floats(pa, op.a_scale + ra, kBM);
    if (kOffsetA) copy_floats(pa + kBM, op.a_offset + ra, kBM);
    if (kOffsetW) copy_floats(pa + 2 * kBM, op.a_sum + ra, kBM);
  }
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_w8a8_gemm(const signed char* __restrict__ codes, const float* __restrict__ a_scale,
               const float* __restrict__ a_offset, const int* __restrict__ a_sum, const signed char* __restrict__ wq,
               const float* __restrict__ w_scale, const float* __restrict__ w_offset, const int* __restrict__ w_sum,
               const TX* __restrict__ bias, TX* __restrict__ y, int M) {
  extern __shared__ __align__(128) unsigned char ring[];
  const W8a8Operands op{codes, a_scale, a_offset, a_sum, wq, w_scale, w_offset, w_sum};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int gq = lane / 4, t = lane % 4;
  const int n0 = blockIdx.y * kBN;
  // The first stages' weights are queued before the wait (under PDL they
  // stream while the quantization kernel runs), x's after it; the first
  // group then holds every prologue stage's weights and stage 0's x, group s
  // stage s's x, so "groups 0..kt complete" still means "stage kt landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load_stage_w(op, n0, s, ring + s * kStageBytes);
  qjit::wait_for_previous_grid();  // the codes come from the quantization kernel
  qjit::allow_next_grid();

  for (int m0 = blockIdx.x * kBM; m0 < M; m0 += gridDim.x * kBM) {
    __syncthreads();  // the previous pass is done with the ring
    float acc[kMI][kNI][4];
    Part part[kMI][kNI][4];
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f, part[i][j][e] = 0;

    const bool first_pass = m0 == static_cast<int>(blockIdx.x) * kBM;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (!first_pass) load_stage_w(op, n0, s, ring + s * kStageBytes);
      load_stage_x(op, m0, M, s, ring + s * kStageBytes);
      commit();
    }

#pragma unroll 1
    for (int kt = 0; kt < kKTiles; ++kt) {
      asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
      // Tile kt has landed for everyone, and every warp is done with tile
      // kt − 1, whose slot the load below refills.
      __syncthreads();
      unsigned char* refill = ring + ((kt + kStages - 1) % kStages) * kStageBytes;
      load_stage_w(op, n0, kt + kStages - 1, refill);
      load_stage_x(op, m0, M, kt + kStages - 1, refill);
      commit();
      const unsigned char* stage = ring + (kt % kStages) * kStageBytes;
      const unsigned char* sa = stage;
      const unsigned char* sb = stage + kABytes;
#pragma unroll
      for (int ks = 0; ks < kBK / 32; ++ks) {
        // A (m16 × k32): lanes 0–15 address rows 0–15 at piece 2ks, lanes
        // 16–31 the same rows at piece 2ks + 1: registers a0..a3 are the
        // fragment's (rows g, g + 8) × (k 0–15, 16–31).
        unsigned a[kMI][4];
#pragma unroll
        for (int i = 0; i < kMI; ++i)
          ldmatrix_x4(a[i], sa + swizzled(wm * kWM + 16 * i + lane % 16, 2 * ks + lane / 16));
        // B (k32 × n8, W's rows are B's columns): one x4 covers two n8 tiles,
        // lanes 0–7 / 8–15 tile j's k 0–15 / 16–31, lanes 16–31 tile j + 1's.
#pragma unroll
        for (int j = 0; j < kNI; j += 2) {
          unsigned b[4];
          ldmatrix_x4(b, sb + swizzled(wn * kWN + 8 * j + (lane / 16) * 8 + lane % 8, 2 * ks + (lane / 8) % 2));
#pragma unroll
          for (int i = 0; i < kMI; ++i) {
            mma_k32(part[i][j], a[i], b[0], b[1]);
            mma_k32(part[i][j + 1], a[i], b[2], b[3]);
          }
        }
      }
      if ((kt + 1) % kTilesPerBlock == 0) {
        // Promote: accumulator e of lane (g, t) is row g + 8(e / 2), column 2t + e % 2 of its tile.
        const float* pa = reinterpret_cast<const float*>(stage + kABytes + kBBytes);
        const float* pb = pa + 3 * kBM;
        if constexpr (kFp8) {
          // An n8 tile's columns lie in one 128-column tile of W's scales.
#pragma unroll
          for (int i = 0; i < kMI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float scale_a = pa[wm * kWM + 16 * i + gq + 8 * h];
#pragma unroll
              for (int j = 0; j < kNI; ++j) {
                const float scale_w = pb[(wn * kWN + 8 * j) / 128];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  float& c = acc[i][j][2 * h + e];
                  c = w8a8_add_fp8_block(c, part[i][j][2 * h + e], scale_a, scale_w);
                  part[i][j][2 * h + e] = 0;
                }
              }
            }
        } else {
          W8a8ColParams col[kNI][2];
#pragma unroll
          for (int j = 0; j < kNI; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int c = wn * kWN + 8 * j + 2 * t + h;
              col[j][h] = w8a8_col_params(pb[c], kOffsetW ? pb[kBN + c] : 0.0f,
                                          kOffsetA ? __float_as_int(pb[2 * kBN + c]) : 0);
            }
#pragma unroll
          for (int i = 0; i < kMI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = wm * kWM + 16 * i + gq + 8 * h;
              const W8a8RowParams row{pa[r], kOffsetA ? pa[kBM + r] : 0.0f,
                                      kOffsetW ? static_cast<float>(__float_as_int(pa[2 * kBM + r])) : 0.0f};
#pragma unroll
              for (int j = 0; j < kNI; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  acc[i][j][2 * h + e] = w8a8_add_block(acc[i][j][2 * h + e], part[i][j][2 * h + e], row, col[j][e]);
                  part[i][j][2 * h + e] = 0;
                }
            }
        }
      }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");

    // Two adjacent columns per store.
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm * kWM + 16 * i + gq + 8 * h;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < kNI; ++j) {
          const int n = n0 + wn * kWN + 8 * j + 2 * t;
          TX* out = y + static_cast<long long>(m) * kN + n;
          const TX v0 = qjit::from_f32<TX>(w8a8_finish(acc[i][j][2 * h], bias, n));
          const TX v1 = qjit::from_f32<TX>(w8a8_finish(acc[i][j][2 * h + 1], bias, n + 1));
          if constexpr (sizeof(TX) == 4) {
            *reinterpret_cast<float2*>(out) = make_float2(*reinterpret_cast<const float*>(&v0), *reinterpret_cast<const float*>(&v1));
          } else {
            const unsigned short u0 = *reinterpret_cast<const unsigned short*>(&v0), u1 = *reinterpret_cast<const unsigned short*>(&v1);
            *reinterpret_cast<unsigned*>(out) = static_cast<unsigned>(u0) | (static_cast<unsigned>(u1) << 16);
          }
        }
      }
  }
}
