// w8a8_gemm's online quantization of x (the plan's first kernel): per row and
// block of kBlock codes, the block's rule of tuner/reference/w8a8_quant.h,
// operation for operation, so that codes, scales, offsets and sums equal the
// CPU reference bit for bit:
//   offset (seed 002's QuantA): scale = (max − min) / 255; offset = max −
//     127·scale in one rounding (the seed's FFMA, nvcc contracts its
//     multiply-subtract); |scale| ≤ 1e-5 → scale 1, offset max;
//     q = roundf((x − offset) / scale) (half away from zero), saturated;
//   symmetric: scale = amax / 127 (1 when that is 0); q = rint(x / scale)
//     (half to even), saturated;
//   e4m3 (kFp8, tuner/reference/w8a8_fp8.h): scale = amax / 448 (1 when that
//     is 0); q = the e4m3 code of x / scale, rounded to nearest even and
//     saturated to ±448 by cvt.rn.satfinite.e4m3x2.f32. No sum.
// Every rounding is spelled out (__fsub_rn, __fdiv_rn, __fmaf_rn) so that no
// compiler flag or contraction can change it.
//
// One warp per (row, block): lane L holds elements L, L + 32, ... of the block
// (coalesced loads of x, one byte per lane per store of the codes). Outputs,
// in the plan's workspace (codegen/ops/w8a8_gemm.h W8a8Workspace):
//   codes [kChunkRows][kK]; scale, offset, sum [kBlocks][kParamRows] (the
//   cublaslt family's scales [kBlocks][M], as cuBLASLt reads them).

constexpr int kPerLane = (kBlock + 31) / 32;

__device__ __forceinline__ float warp_min(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// v's e4m3 code: round to nearest even, ±448 past the range (sm_89+). The
// instruction converts a pair: the first source goes to the high byte.
__device__ __forceinline__ unsigned char e4m3_code(float v) {
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(v));
  return static_cast<unsigned char>(pair & 0xFF);
}

// The float → int conversion of an out-of-range float is undefined: saturate first.
__device__ __forceinline__ int saturate_code(float r) { return static_cast<int>(fminf(127.0f, fmaxf(-128.0f, r))); }

// The calling warp quantizes block `block` of x's row `row`: its kBlock
// codes go to code[0 ..) and its parameters to index `at` of each array
// (global or shared memory alike).
__device__ __forceinline__ void w8a8_quantize_one(const TX* __restrict__ x, int row, int block, signed char* code,
                                                  float* a_scale, float* a_offset, int* a_sum, int at) {
  const int lane = threadIdx.x % 32;
  const long long first = static_cast<long long>(row) * kK + static_cast<long long>(block) * kBlock;

  float v[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    v[j] = (kBlock % 32 == 0 || i < kBlock) ? qjit::to_f32(x[first + i]) : 0.0f;
  }
  const auto in_block = [&](int j) { return kBlock % 32 == 0 || lane + 32 * j < kBlock; };

  float scale, offset = 0.0f;
  if constexpr (kOffsetA) {
    float lo = 3.402823466e38f, hi = -3.402823466e38f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      if (in_block(j)) lo = fminf(lo, v[j]), hi = fmaxf(hi, v[j]);
    lo = warp_min(lo), hi = warp_max(hi);
    scale = __fdiv_rn(__fsub_rn(hi, lo), 255.0f);
    // The seed compares a float with the double 1e-5; float(1e-5) < 1e-5, so the comparison in double is the rule.
    if (fabs(static_cast<double>(scale)) > 1e-5) {
      offset = __fmaf_rn(-scale, 127.0f, hi);
    } else {
      scale = 1.0f;
      offset = hi;
    }
  } else {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      if (in_block(j)) amax = fmaxf(amax, fabsf(v[j]));
    amax = warp_max(amax);
    scale = __fdiv_rn(amax, kFp8 ? 448.0f : 127.0f);
    if (scale == 0.0f) scale = 1.0f;
  }
  if constexpr (kFp8) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      if (in_block(j)) reinterpret_cast<unsigned char*>(code)[lane + 32 * j] = e4m3_code(__fdiv_rn(v[j], scale));
    if (lane == 0) a_scale[at] = scale;
    return;
  }

  int sum = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (!in_block(j)) continue;
    const float r = kOffsetA ? roundf(__fdiv_rn(__fsub_rn(v[j], offset), scale)) : rintf(__fdiv_rn(v[j], scale));
    const int q = saturate_code(r);
    sum += q;
    code[lane + 32 * j] = static_cast<signed char>(q);
  }
  sum = warp_sum_int(sum);
  if (lane == 0) {
    a_scale[at] = scale;
    if (kOffsetA) a_offset[at] = offset;
    a_sum[at] = sum;
  }
}

// The calling warp quantizes (row, block) number `item` (row-major over
// [M][kBlocks]) into the plan's workspace: codes [rows][kK], parameters at
// [block][param_rows] of each array.
__device__ __forceinline__ void w8a8_quantize_block(const TX* __restrict__ x, int M, long long item,
                                                    signed char* __restrict__ codes, float* __restrict__ a_scale,
                                                    float* __restrict__ a_offset, int* __restrict__ a_sum,
                                                    int param_rows) {
  const int row = static_cast<int>(item / kBlocks), block = static_cast<int>(item % kBlocks);
  if (row >= M) return;
  w8a8_quantize_one(x, row, block, codes + static_cast<long long>(row) * kK + static_cast<long long>(block) * kBlock,
                    a_scale, a_offset, a_sum, block * param_rows + row);
}

extern "C" __global__ void __launch_bounds__(32 * kQuantWarps)
qjit_w8a8_quant_a(const TX* __restrict__ x, int M, signed char* __restrict__ codes, float* __restrict__ a_scale,
                  float* __restrict__ a_offset, int* __restrict__ a_sum) {
  // x may come from the previous kernel, and the previous call's GEMM reads
  // the workspace written here: nothing before the wait.
  qjit::wait_for_previous_grid();
  qjit::allow_next_grid();
  const long long item = static_cast<long long>(blockIdx.x) * kQuantWarps + threadIdx.x / 32;
  w8a8_quantize_block(x, M, item, codes, a_scale, a_offset, a_sum, kParamRows);
}
