// w8a8_gemm, the obviously correct kernel: one thread per element y[m][n],
// each block of k an int32 dot product of codes (e4m3: an fp32 sum of the
// codes' exact products, in k order), promoted to float by
// w8a8_combine.cuh. Any block size (not only multiples of 32); no tiling, no
// tensor cores. The first kernel of the plan quantizes x
// (w8a8_quant_a.cuh).
using namespace qjit_spec;
#include "qjit/w8a8_gemm/w8a8_quant_a.cuh"
#include "qjit/w8a8_gemm/w8a8_combine.cuh"

extern "C" __global__ void __launch_bounds__(kThreads)
qjit_w8a8_gemm(const signed char* __restrict__ codes, const float* __restrict__ a_scale,
               const float* __restrict__ a_offset, const int* __restrict__ a_sum, const signed char* __restrict__ wq,
               const float* __restrict__ w_scale, const float* __restrict__ w_offset, const int* __restrict__ w_sum,
               const TX* __restrict__ bias, TX* __restrict__ y, int M) {
  qjit::wait_for_previous_grid();  // the codes come from the quantization kernel
  qjit::allow_next_grid();
  const int n = blockIdx.x * kThreads + threadIdx.x, row = blockIdx.y;
  if (n >= kN || row >= M) return;
  const signed char* a = codes + static_cast<long long>(row) * kK;
  const signed char* w = wq + static_cast<long long>(n) * kK;
  float acc = 0.0f;
  for (int b = 0; b < kBlocks; ++b) {
    if constexpr (kFp8) {
      float p = 0.0f;
      for (int k = b * kBlock; k < (b + 1) * kBlock; ++k)  // each product is exact in float: one rounding per add
        p = __fmaf_rn(e4m3_value(static_cast<unsigned char>(a[k])), e4m3_value(static_cast<unsigned char>(w[k])), p);
      acc = w8a8_add_fp8_block(acc, p, a_scale[b * kParamRows + row], w_scale[b * kWScaleCols + n / 128]);
      continue;
    }
    int cq = 0;
    for (int k = b * kBlock; k < (b + 1) * kBlock; ++k) cq += static_cast<int>(a[k]) * static_cast<int>(w[k]);
    const int pa = b * kParamRows + row, pw = b * kN + n;
    const W8a8RowParams ap{a_scale[pa], kOffsetA ? a_offset[pa] : 0.0f, static_cast<float>(a_sum[pa])};
    const W8a8ColParams wp = w8a8_col_params(w_scale[pw], kOffsetW ? w_offset[pw] : 0.0f, kOffsetA ? w_sum[pw] : 0);
    acc = w8a8_add_block(acc, cq, ap, wp);
  }
  y[static_cast<long long>(row) * kN + n] = qjit::from_f32<TX>(w8a8_finish(acc, bias, n));
}
