#pragma once
// wq_gemm's epilogue, shared by its kernels: y[m][n] = clamp(sum + bias[n])
// (+ residual[m][n]). Reads kHasBias, kAct, kHasResidual from qjit_spec.

__device__ __forceinline__ float clamp_act(float v) {
  if constexpr (kAct >= 1) v = fmaxf(v, 0.0f);
  if constexpr (kAct == 2) v = fminf(v, 6.0f);
  return v;
}

__device__ __forceinline__ float epilogue(float v, const TX* __restrict__ bias, int n) {
  if constexpr (kHasBias) v += qjit::to_f32(bias[n]);
  return clamp_act(v);
}

// residual may be y itself (y += X·Wᵀ): the element is read and then written
// by the same thread, so neither pointer is __restrict__.
__device__ __forceinline__ void store_y(float sum, const TX* __restrict__ bias, const TX* residual, TX* y, int m,
                                       int n) {
  const long long at = static_cast<long long>(m) * kN + n;
  float v = epilogue(sum, bias, n);
  if constexpr (kHasResidual) v += qjit::to_f32(residual[at]);
  y[at] = qjit::from_f32<TX>(v);
}
