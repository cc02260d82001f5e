// gru_quant, step plan: the seed's fixed-point GRU (../shared/seeds/000_*),
// every shift, zero point and LUT segment a constant of qjit_spec.
//   qjit_gru_input: ih[row][c] = sat(rshift_round(Σ_k W[c][k]·(x[row][k] − zp_x)
//                   + rshift_round(bw[c], Rows::kIhBias[c]), Rows::kIhOut[c]) + zp_ih)
//                   for every row = t·N + n: one thread per (row, c).
//   qjit_gru_step:  launched T times; step t, one thread per (n, j): the
//                   three rows j, H+j, 2H+j of R·(h_{t−1} − zp_h) + br, then
//                   the gate arithmetic C-1..C-4, h_t into y[t][n][j].
// Σ W·(x − zp) equals the seed's GEMM minus its row sum times zp. Products
// and sums are int64 (exact for any validated params); the CPU reference
// is tuner/reference/gru_quant.cpp, which this equals bit for bit.

using namespace qjit_spec;

// DESIGN.md: n <= 0: x·2^−n; n > 0: round(|x| / 2^n), ties to even, sign restored.
__device__ __forceinline__ long long rshift_round(long long x, int n) {
  if (n <= 0) return x * (1LL << -n);
  if (n >= 64) return 0;
  const unsigned long long a = x < 0 ? 0ULL - static_cast<unsigned long long>(x) : static_cast<unsigned long long>(x);
  unsigned long long q = a >> n;
  const unsigned long long r = a & ((1ULL << n) - 1), half = 1ULL << (n - 1);
  if (r > half || (r == half && (q & 1))) ++q;
  return x < 0 ? -static_cast<long long>(q) : static_cast<long long>(q);
}

__device__ __forceinline__ long long saturate(long long v, long long lo, long long hi) { return v < lo ? lo : v > hi ? hi : v; }

// Segment i is the first with q < kThreshold[i] (else the last): the number of
// earlier thresholds at or below q, the thresholds being increasing.
template <class L>
__device__ __forceinline__ long long lut(long long q) {
  q = saturate(q, L::kInLo, L::kInHi);
  int i = 0;
#pragma unroll
  for (int s = 0; s + 1 < L::kCount; ++s) i += q >= L::kThreshold[s];
  return saturate(rshift_round(L::kQb[i] * (q - L::kInZp), static_cast<int>(L::kShift[i])) + L::kTermC[i], L::kOutLo,
                  L::kOutHi);
}

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
  acc += rshift_round(bw[c], static_cast<int>(Rows::kIhBias[c]));
  ih[row * 3 * kH + c] = static_cast<int>(saturate(rshift_round(acc, static_cast<int>(Rows::kIhOut[c])) + kIhZp, kIhLo, kIhHi));
}

extern "C" __global__ void __launch_bounds__(kThreads)
qjit_gru_step(int t, const int* __restrict__ ih, const int* __restrict__ h0, const signed char* __restrict__ R,
              const int* __restrict__ br, int* __restrict__ y) {
  const int j = blockIdx.y * kThreads + threadIdx.x, n = blockIdx.x;
  if (j >= kH) return;
  const int* hp = t == 0 ? h0 + static_cast<long long>(n) * kH : y + (static_cast<long long>(t - 1) * kN + n) * kH;
  long long acc[3] = {0, 0, 0};
  for (int k = 0; k < kH; ++k) {
    const long long hv = hp[k] - kHidZp;
#pragma unroll
    for (int g = 0; g < 3; ++g) acc[g] += static_cast<long long>(R[(static_cast<long long>(g) * kH + j) * kH + k]) * hv;
  }
  long long hh[3];
#pragma unroll
  for (int g = 0; g < 3; ++g) {
    const int c = g * kH + j;
    const long long v = acc[g] + rshift_round(br[c], static_cast<int>(Rows::kHhBias[c]));
    hh[g] = saturate(rshift_round(v, static_cast<int>(Rows::kHhOut[c])) + kHhZp, kHhLo, kHhHi) - kHhZp;
  }
  const int* ir = ih + (static_cast<long long>(t) * kN + n) * 3 * kH;
  const long long ih_u = ir[j] - kIhZp, ih_r = ir[kH + j] - kIhZp, ih_n = ir[2 * kH + j] - kIhZp;
  // C-1, C-2: rescaled addends (not saturated), the sum saturated as the LUT's input.
  const long long u = lut<ULut>(saturate(rshift_round(ih_u, kIhToUIn) + rshift_round(hh[0], kHhToUIn) + kUInZp, kUInLo, kUInHi));
  const long long r = lut<RLut>(saturate(rshift_round(ih_r, kIhToRIn) + rshift_round(hh[1], kHhToRIn) + kRInZp, kRInLo, kRInHi));
  // C-3: reset applies to (R_n·h + b_rn); the product goes straight to n_in's scale.
  const long long n_in = saturate(rshift_round(ih_n, kIhToNIn) + rshift_round((r - kROutZp) * hh[2], kRHhToNIn) + kNInZp,
                                  kNInLo, kNInHi);
  const long long nv = lut<NLut>(n_in);
  // C-4: n aligned to h (not saturated), both products in S_u·S_h, one rescale to h.
  const long long n_aligned = rshift_round(nv - kNOutZp, kNOutToHid) + kHidZp;
  const long long combined = (u - kUOutZp) * (hp[j] - kHidZp) + (kQOne - u) * (n_aligned - kHidZp);
  y[(static_cast<long long>(t) * kN + n) * kH + j] =
      static_cast<int>(saturate(rshift_round(combined, kUOutShift) + kHidZp, kHidLo, kHidHi));
}
