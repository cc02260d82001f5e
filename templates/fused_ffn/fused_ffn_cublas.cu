// fused_ffn's cuBLAS family, last step: y = Act(h1) ⊙ h3 elementwise.
// Two cuBLAS GEMMs before it wrote the fp32 sums h1 = x·W1ᵀ at sums[0, kM·kH)
// and h3 = x·W3ᵀ at sums[kM·kH, 2·kM·kH), each row-major [kM][kH]; this
// kernel reads both once and writes y [kM][kH] in TY. One thread per element.
// The specialisation (shape, output type, block size) comes from qjit_spec.

using namespace qjit_spec;

extern "C" __global__ void __launch_bounds__(kThreads)
qjit_fused_ffn_swiglu(const float* __restrict__ sums, TY* __restrict__ y) {
  constexpr long long kElems = static_cast<long long>(kM) * kH;
  const long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < kElems) y[i] = qjit::from_f32<TY>(Act::apply(sums[i]) * sums[kElems + i]);
}
