// FP16 lookup-table evaluation (../shared/seeds/003_*), bit-exact with the
// CPU reference tuner/reference/fp_lut.cpp, which spells out the same steps.
// L is a generated struct with kCuts[11], kScales[10], kTable[259] (fp16
// bits) and kReduceAngle; `table` points at kTable or a shared-memory copy.
#pragma once
#include "qjit/qjit_common.cuh"

namespace qjit {

constexpr int kLutPre[10] = {0, 1, 33, 65, 97, 129, 161, 193, 225, 257};  // first entry of interval i
constexpr int kLutLen[10] = {1, 32, 32, 32, 32, 32, 32, 32, 32, 1};       // last local index of interval i
constexpr float kLutTwoPi = 6.28318530717958647692f;
constexpr float kLutPi = 3.14159265358979323846f;

template <class L>
__device__ __forceinline__ float lut_eval(float x, const unsigned short* table) {
  // 1. sin/cos: reduce modulo 2π into [-π, π] (fmodf is exact).
  if constexpr (L::kReduceAngle) {
    x = fmodf(x, kLutTwoPi);
    if (x > kLutPi) x -= kLutTwoPi;
    else if (x < -kLutPi) x += kLutTwoPi;
  }
  if (x != x) return x;  // NaN in, NaN out
  // 2. Clamp to [c0, c10], round to fp16 (the table's input precision).
  x = fminf(fmaxf(x, L::kCuts[0]), L::kCuts[10]);
  const float xh = to_f32(from_f32<half_t>(x));
  const auto entry = [&](int i) { return to_f32(half_t{table[i]}); };
  if (xh <= L::kCuts[0]) return entry(0);
  if (xh >= L::kCuts[10]) return entry(258);
  // 3. Interval i: the last cut point <= xh (compile-time indices: no table walk).
  float c = L::kCuts[0], s = L::kScales[0];
  int pre = 0, len = 1;
#pragma unroll
  for (int k = 1; k < 10; ++k)
    if (xh >= L::kCuts[k]) c = L::kCuts[k], s = L::kScales[k], pre = kLutPre[k], len = kLutLen[k];
  // 4. Position, neighbours, weight; 5. y = T[j] + α (T[j+] - T[j]) as one fma.
  const float p = (xh - c) * s;
  const float j = fminf(fmaxf(floorf(p), 0.0f), static_cast<float>(len));
  const int lo = static_cast<int>(j), hi = min(lo + 1, len);
  const float alpha = fminf(fmaxf(p - j, 0.0f), 1.0f);
  const float t0 = entry(pre + lo), t1 = entry(pre + hi);
  return __fmaf_rn(t1 - t0, alpha, t0);
}

// Step 6 of the reference: clamp to the finite fp16 range, NaN kept
// (fminf/fmaxf alone would turn a NaN into a bound).
__device__ __forceinline__ float clamp_fp16_range(float y) {
  return y != y ? y : fminf(fmaxf(y, -65504.0f), 65504.0f);
}

// The activation interface fused_ffn uses: y = Act::apply(z).
struct SiluExpf {
  __device__ __forceinline__ static float apply(float z) { return silu(z); }
};
template <class L>
struct LutActivation {
  __device__ __forceinline__ static float apply(float z) {
    return clamp_fp16_range(lut_eval<L>(z, L::kTable));
  }
};

}  // namespace qjit
