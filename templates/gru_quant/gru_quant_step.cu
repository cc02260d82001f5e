// gru_quant, step plan: the seed's fixed-point GRU (../shared/seeds/000_*),
// every shift, zero point and LUT segment a constant of qjit_spec.
//   qjit_gru_input: ih[row][c] = sat(rshift_round(Σ_k W[c][k]·(x[row][k] − zp_x)
//                   + rshift_round(bw[c], Rows::kIhBias[c]), Rows::kIhOut[c]) + zp_ih)
//                   for every row = t·N + n: one thread per (row, c).
//   qjit_gru_step:  launched T times; step t, one thread per (n, j): the
//                   three rows j, H+j, 2H+j of R·(h_{t−1} − zp_h) + br, then
//                   the gate arithmetic C-1..C-4, h_t into y[t][n][j] (and
//                   its dequantized value into y_float when given).
// Σ W·(x − zp) equals the seed's GEMM minus its row sum times zp. Products
// and sums are int64 (exact for any validated params): this plan is the
// plain one, for shapes the cluster plan does not fit. The CPU reference
// is tuner/reference/gru_quant.cpp, which this equals bit for bit.

#include "qjit/gru_quant/gru_gates.cuh"

using namespace qjit_spec;
using namespace qjit_gru;

extern "C" __global__ void __launch_bounds__(kThreads)
qjit_gru_input(const int* __restrict__ x, const signed char* __restrict__ W, const int* __restrict__ bw,
               int* __restrict__ ih) {
  const int c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= 3 * kH) return;
  const long long row = blockIdx.x;
  const int* xr = x + row * kC;
  const signed char* wr = W + static_cast<long long>(c) * kC;
  long long acc = 0;
  for (int k = 0; k < kC; ++k) acc += static_cast<long long>(wr[k]) * (xr[k] - kXZp);
  ih[row * 3 * kH + c] = linear_out<kIhZp, kIhLo, kIhHi, long long>(
                            acc, rshift_round(bw[c], static_cast<int>(Rows::kIhBias[c])), static_cast<int>(Rows::kIhOut[c])) +
                        kIhZp;
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_gru_step(int t, const int* __restrict__ ih, const int* __restrict__ h0, const signed char* __restrict__ R,
              const int* __restrict__ br, int* __restrict__ y, float* __restrict__ y_float) {
  const int j = blockIdx.y * kThreads + threadIdx.x, n = blockIdx.x;
  if (j >= kH) return;
  const int* hp = t == 0 ? h0 + static_cast<long long>(n) * kH : y + (static_cast<long long>(t - 1) * kN + n) * kH;
  long long acc[3] = {0, 0, 0};
  for (int k = 0; k < kH; ++k) {
    const long long hv = hp[k] - kHidZp;
#pragma unroll
    for (int g = 0; g < 3; ++g) acc[g] += static_cast<long long>(R[(static_cast<long long>(g) * kH + j) * kH + k]) * hv;
  }
  int hh[3];
#pragma unroll
  for (int g = 0; g < 3; ++g) {
    const int c = g * kH + j;
    hh[g] = linear_out<kHhZp, kHhLo, kHhHi, long long>(acc[g], rshift_round(br[c], static_cast<int>(Rows::kHhBias[c])),
                                                       static_cast<int>(Rows::kHhOut[c]));
  }
  const int* ir = ih + (static_cast<long long>(t) * kN + n) * 3 * kH;
  const long long at = (static_cast<long long>(t) * kN + n) * kH + j;
  y[at] = static_cast<int>(gru_cell(ir[j] - kIhZp, ir[kH + j] - kIhZp, ir[2 * kH + j] - kIhZp, hh[0], hh[1], hh[2], hp[j]));
  if (y_float) y_float[at] = dequantize_h(y[at]);
}
