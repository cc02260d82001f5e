// gru_quant's integer arithmetic, shared by its plans: rshift_round, the
// piecewise-linear LUTs and the gate math C-1..C-4 of the seed
// (../shared/seeds/000_*), every constant from qjit_spec. The CPU reference
// is tuner/reference/gru_quant.cpp, which these equal bit for bit.
#pragma once

namespace qjit_gru {

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

// Segment i is the first with q < kThreshold[i] (else the last). The
// thresholds increase, so it is the last s + 1 with q >= kThreshold[s]: an
// unrolled chain of selects keeps every segment's constants immediates
// (an indexed constexpr array would be a memory load on the step's path).
template <class L>
__device__ __forceinline__ long long lut(long long q) {
  q = saturate(q, L::kInLo, L::kInHi);
  long long qb = L::kQb[0], tc = L::kTermC[0];
  int n = static_cast<int>(L::kShift[0]);
#pragma unroll
  for (int s = 0; s + 1 < L::kCount; ++s)
    if (q >= L::kThreshold[s]) {
      qb = L::kQb[s + 1];
      tc = L::kTermC[s + 1];
      n = static_cast<int>(L::kShift[s + 1]);
    }
  return saturate(rshift_round(qb * (q - L::kInZp), n) + tc, L::kOutLo, L::kOutHi);
}

// A linear output of one gate row from its exact GEMM sum Σ w·(v − zp_v):
// sat(rshift_round(sum + bias, shift) + zp) with bias = rshift_round(b, its
// shift into the GEMM's scale) (seed step B: bias in the GEMM's scale, one
// rescale). Returned centred: minus the output's zero point.
template <long long kZp, long long kLo, long long kHi>
__device__ __forceinline__ long long linear_out(long long sum, long long bias, int shift) {
  return saturate(rshift_round(sum + bias, shift) + kZp, kLo, kHi) - kZp;
}

// The gate arithmetic of one unit: ih and hh centred (minus their zero
// points, gates u, r, n), h_prev its code; returns h's new code.
__device__ __forceinline__ long long gru_cell(long long ih_u, long long ih_r, long long ih_n, long long hh_u, long long hh_r,
                                              long long hh_n, long long h_prev) {
  // C-1, C-2: rescaled addends (not saturated), the sum saturated as the LUT's input.
  const long long u = lut<ULut>(saturate(rshift_round(ih_u, kIhToUIn) + rshift_round(hh_u, kHhToUIn) + kUInZp, kUInLo, kUInHi));
  const long long r = lut<RLut>(saturate(rshift_round(ih_r, kIhToRIn) + rshift_round(hh_r, kHhToRIn) + kRInZp, kRInLo, kRInHi));
  // C-3: reset applies to (R_n·h + b_rn); the product goes straight to n_in's scale.
  const long long n_in =
      saturate(rshift_round(ih_n, kIhToNIn) + rshift_round((r - kROutZp) * hh_n, kRHhToNIn) + kNInZp, kNInLo, kNInHi);
  const long long nv = lut<NLut>(n_in);
  // C-4: n aligned to h (not saturated), both products in S_u·S_h, one rescale
  // to h; (1 − u) is q_one − u with the seed's single zero point.
  const long long n_aligned = rshift_round(nv - kNOutZp, kNOutToHid) + kHidZp;
  const long long combined = (u - kUOutZp) * (h_prev - kHidZp) + (kQOne - u) * (n_aligned - kHidZp);
  return saturate(rshift_round(combined, kUOutShift) + kHidZp, kHidLo, kHidHi);
}

// The float value of an h code: (q − zp)·2^−shift, exact in fp32 (at most 17
// significant bits times a power of two).
__device__ __forceinline__ float dequantize_h(int q) { return static_cast<float>(q - kHidZp) * kHidScale; }

}  // namespace qjit_gru
