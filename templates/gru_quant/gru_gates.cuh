// gru_quant's integer arithmetic, shared by its plans: rshift_round, the
// piecewise-linear LUTs and the gate math C-1..C-4 of the seed
// (../shared/seeds/000_*), every constant from qjit_spec. The CPU reference
// is tuner/reference/gru_quant.cpp, which these equal bit for bit.
//
// Widths: validation (codegen/ops/gru_params.cpp) bounds every rescaled
// value by int32, so those are ints. The products taken before a rescale
// (a LUT's q_b·(q − zp), r·hh_n, the two terms of the new h) and the GEMM
// sums may need more; the generator sets kWide* (and each LUT's kWide) from
// their bounds, so 8-bit layers never touch 64-bit arithmetic (two
// instructions per operation on the GPU).
#pragma once

namespace qjit_gru {

using namespace qjit_spec;

template <bool kWide> struct IntOf { using T = int; };
template <> struct IntOf<true> { using T = long long; };
template <class T> struct UnsignedOf;
template <> struct UnsignedOf<int> { using T = unsigned; };
template <> struct UnsignedOf<long long> { using T = unsigned long long; };

// DESIGN.md: n <= 0: x·2^−n (the result fits T: the callers' bounds, so a
// shift by T's width or more has x = 0);
// n > 0: round(|x| / 2^n), ties to even, sign restored. Adding
// 2^(n−1) − 1 + (bit n of |x|) before the shift carries into bit n exactly
// when the remainder is above one half, or is one half and the quotient odd.
// rshift_round for a shift known positive (1 ≤ n < T's width): no
// branches on n.
template <class T>
__device__ __forceinline__ T rshift_round_pos(T x, int n) {
  using U = typename UnsignedOf<T>::T;
  const U a = x < 0 ? U(0) - static_cast<U>(x) : static_cast<U>(x);
  const U q = (a + ((U(1) << (n - 1)) - 1) + ((a >> n) & 1)) >> n;
  return x < 0 ? -static_cast<T>(q) : static_cast<T>(q);
}
template <class T>
__device__ __forceinline__ T rshift_round(T x, int n) {
  using U = typename UnsignedOf<T>::T;
  constexpr int kBits = 8 * sizeof(T);
  if (n <= 0) return -n >= kBits ? T(0) : static_cast<T>(static_cast<U>(x) << (-n));
  if (n >= kBits) return 0;
  return rshift_round_pos(x, n);
}
template <bool kPositive, class T>
__device__ __forceinline__ T rshift_round_as(T x, int n) {
  if constexpr (kPositive) return rshift_round_pos(x, n);
  else return rshift_round(x, n);
}

template <class T>
__device__ __forceinline__ T saturate(T v, T lo, T hi) { return v < lo ? lo : v > hi ? hi : v; }
__device__ __forceinline__ int sat32(int v, int lo, int hi) { return saturate<int>(v, lo, hi); }

// Segment i is the first with q < kThreshold[i] (else the last). The
// thresholds increase, so it is the last s + 1 with q >= kThreshold[s]: an
// unrolled chain of selects keeps every segment's constants immediates
// (an indexed constexpr array would be a memory load on the step's path).
template <class L>
__device__ __forceinline__ int lut(int q) {
  q = sat32(q, L::kInLo, L::kInHi);
  int qb = L::kQb[0], tc = L::kTermC[0], n = L::kShift[0];
#pragma unroll
  for (int s = 0; s + 1 < L::kCount; ++s)
    if (q >= L::kThreshold[s]) {
      qb = L::kQb[s + 1];
      tc = L::kTermC[s + 1];
      n = L::kShift[s + 1];
    }
  using P = typename IntOf<L::kWide>::T;
  return sat32(static_cast<int>(rshift_round_as<L::kPositiveShifts>(static_cast<P>(qb) * (q - L::kInZp), n)) + tc,
               L::kOutLo, L::kOutHi);
}

// The cluster plan's LUTs as tables in shared memory when their inputs are
// narrow (the generator's kLutWords: u's, r's, then n's outputs for every
// input code, filled by fill_lut_tables from lut<L> itself): one load in place
// of the chain of selects on the step's critical path.
template <class L>
constexpr int lut_entries() { return L::kInHi - L::kInLo + 1; }
template <class L>
__device__ __forceinline__ int lut_table(const int* table, int q) { return table[sat32(q, L::kInLo, L::kInHi) - L::kInLo]; }
template <class L>
__device__ __forceinline__ void fill_lut_table(int* table, int thread, int threads) {
  for (int i = thread; i < lut_entries<L>(); i += threads) table[i] = lut<L>(L::kInLo + i);
}

// A linear output of one gate row from its exact GEMM sum Σ w·(v − zp_v):
// sat(rshift_round(sum + bias, shift) + zp) with bias = rshift_round(b, its
// shift into the GEMM's scale) (seed step B: bias in the GEMM's scale, one
// rescale). Returned centred: minus the output's zero point.
// kPositive: every row's shift is at least 1 (the generator's kHhOutPositive, kIhOutPositive).
template <int kZp, int kLo, int kHi, class S, bool kPositive = false>
__device__ __forceinline__ int linear_out(S sum, S bias, int shift) {
  return sat32(static_cast<int>(rshift_round_as<kPositive>(sum + bias, shift)) + kZp, kLo, kHi) - kZp;
}

// The gate arithmetic of one unit: ih and hh centred (minus their zero
// points, gates u, r, n), h_prev its code; returns h's new code. With
// kTables the LUTs are read from `tables` (lut_table), else evaluated.
template <bool kTables = false>
__device__ __forceinline__ int gru_cell(int ih_u, int ih_r, int ih_n, int hh_u, int hh_r, int hh_n, int h_prev,
                                        const int* tables = nullptr) {
  const auto apply = [tables](auto lut_tag, int offset, int q) {
    using L = decltype(lut_tag);
    if constexpr (kTables) return lut_table<L>(tables + offset, q);
    else return lut<L>(q);
  };
  constexpr int kROffset = lut_entries<ULut>(), kNOffset = kROffset + lut_entries<RLut>();
  // C-1, C-2: rescaled addends (not saturated), the sum saturated as the LUT's input.
  const int u = apply(ULut{}, 0, sat32(rshift_round(ih_u, kIhToUIn) + rshift_round(hh_u, kHhToUIn) + kUInZp, kUInLo, kUInHi));
  const int r = apply(RLut{}, kROffset, sat32(rshift_round(ih_r, kIhToRIn) + rshift_round(hh_r, kHhToRIn) + kRInZp, kRInLo, kRInHi));
  // C-3: reset applies to (R_n·h + b_rn); the product goes straight to n_in's scale.
  using RH = typename IntOf<kWideRHh>::T;
  const int n_in = sat32(rshift_round(ih_n, kIhToNIn) +
                             static_cast<int>(rshift_round<RH>(static_cast<RH>(r - kROutZp) * hh_n, kRHhToNIn)) + kNInZp,
                         kNInLo, kNInHi);
  const int nv = apply(NLut{}, kNOffset, n_in);
  // C-4: n aligned to h (not saturated), both products in S_u·S_h, one rescale
  // to h; (1 − u) is q_one − u with the seed's single zero point.
  using CT = typename IntOf<kWideCombined>::T;
  const int n_aligned = rshift_round(nv - kNOutZp, kNOutToHid) + kHidZp;
  const CT combined = static_cast<CT>(u - kUOutZp) * (h_prev - kHidZp) + static_cast<CT>(kQOne - u) * (n_aligned - kHidZp);
  return sat32(static_cast<int>(rshift_round<CT>(combined, kUOutShift)) + kHidZp, kHidLo, kHidHi);
}

// The float value of an h code: (q − zp)·2^−shift, exact in fp32 (at most 17
// significant bits times a power of two).
__device__ __forceinline__ float dequantize_h(int q) { return static_cast<float>(q - kHidZp) * kHidScale; }

}  // namespace qjit_gru
