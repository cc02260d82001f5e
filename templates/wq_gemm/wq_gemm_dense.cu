// wq_gemm's "cublas" family (codegen/ops/wq_dense.h has the launch's steps):
// qjit_wq_gemm dequantises the native weights into a dense W[n][k] of the
// scales' type at the start of the workspace, which cuBLAS then multiplies;
// qjit_wq_gemm_epilogue stores y from the GEMM's fp32 sums where a bias or a
// clamp follows. Each weight is the reference's w rounded once to the
// scales' type (dequant2<false>), the value the tensor-core families feed
// their mma; y is rounded once, by cuBLAS or by store_y.
#include "qjit/wq_gemm/wq_dequant.cuh"
#include "qjit/wq_gemm/wq_gemm_epilogue.cuh"

static_assert(kMatrices == 1, "wq_gemm multiplies one matrix");
static_assert(qjit::IsBf16<TX>::value == qjit::IsBf16<TS>::value && sizeof(TX) == 2,
              "cuBLAS multiplies x by W of one type: x must be the scales' type");

constexpr long long kTilesTotal = static_cast<long long>(kNTiles) * kChunks;

// Warp w of block b takes native tiles (b·kWarps + w)·kTilesPerWarp onward;
// tile number nt·kChunks + kc covers rows 16nt .. 16nt + 15 and k 64kc ..
// 64kc + 63 (tuner/reference/wq_gemm.h). Lane (gq, t) holds rows gq and
// gq + 8 at k 16t .. 16t + 15, register R = 4s + r being row gq + 8(r%2) at
// k 16t + 2s + 8(r/2) + {0, 1}: so row gq's 16 values in k order are
// registers 0, 4, 8, 12, 2, 6, 10, 14 (reg_of_pair) and row gq + 8's the
// next ones, two 16-byte stores each (the 4 lanes of a quad write a row's
// 128 contiguous bytes).
// g is 32, 64, 128 or k: a lane's 16 k lie in one group. A warp loads all
// its tiles' words, scales and zeros before it stores any, so that those
// loads are in flight together (as awq_dequant's units), and, launched
// after another kernel (PDL), before that kernel has finished: W is written
// only after it, since the GEMM of an earlier launch may still read it.
extern "C" __global__ void __launch_bounds__(32 * kWarps)
qjit_wq_gemm(const TX* __restrict__ x, const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
             const void* __restrict__ zeros, const TX* __restrict__ bias, const TX* residual, TX* y, int M,
             void* workspace) {
  const int lane = threadIdx.x % 32, gq = lane / 4, t = lane % 4;
  const long long first = (static_cast<long long>(blockIdx.x) * kWarps + threadIdx.x / 32) * kTilesPerWarp;
  TS* dense = static_cast<TS*>(workspace);
  qjit::allow_next_grid();
  unsigned w[kTilesPerWarp][kBits];
  RowRaw raw[kTilesPerWarp][2];
#pragma unroll
  for (int i = 0; i < kTilesPerWarp; ++i) {
    const long long tile = first + i;
    if (tile >= kTilesTotal) break;
    const int n0 = 16 * static_cast<int>(tile / kChunks) + gq;
    const int group = (static_cast<int>(tile % kChunks) * 64 + 16 * t) / kGroup;
    load_tile(qweight + tile * 32 * kBits, lane, w[i]);
    raw[i][0] = load_row(scales, zeros, group, n0);
    raw[i][1] = load_row(scales, zeros, group, n0 + 8);
  }
  qjit::wait_for_previous_grid();
#pragma unroll
  for (int i = 0; i < kTilesPerWarp; ++i) {
    const long long tile = first + i;
    if (tile >= kTilesTotal) return;
    const int n0 = 16 * static_cast<int>(tile / kChunks) + gq, k0 = static_cast<int>(tile % kChunks) * 64 + 16 * t;
    const RowParams p[2] = {row_params(raw[i][0]), row_params(raw[i][1])};
    unsigned a[16];
#pragma unroll
    for (int R = 0; R < 16; ++R) a[R] = dequant2<false>(w[i], R, p[R % 2]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4* row = reinterpret_cast<uint4*>(dense + static_cast<long long>(n0 + 8 * h) * kK + k0);
      row[0] = make_uint4(a[reg_of_pair(0, h)], a[reg_of_pair(1, h)], a[reg_of_pair(2, h)], a[reg_of_pair(3, h)]);
      row[1] = make_uint4(a[reg_of_pair(4, h)], a[reg_of_pair(5, h)], a[reg_of_pair(6, h)], a[reg_of_pair(7, h)]);
    }
  }
}

// y for rows m0 .. m0 + rows - 1 from the GEMM's fp32 sums of those rows
// ([rows][kN]): clamp(sum + bias) (+ residual), as every wq_gemm kernel
// stores it. residual may be y itself (each element read, then written, by
// one thread).
extern "C" __global__ void __launch_bounds__(256)
qjit_wq_gemm_epilogue(const float* __restrict__ sums, const TX* __restrict__ bias, const TX* residual, TX* y,
                      int rows, int m0) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * kN) return;
  store_y(sums[i], bias, residual, y, m0 + static_cast<int>(i / kN), static_cast<int>(i % kN));
}
