// fp_lut: y[i] = LUT(x[i]) for i < kN: an FP16 table with linear
// interpolation (../shared/seeds/003_*), the table and cut points baked in as
// the constants of struct Lut. Output clamped to ±65504, then rounded to TOut.
//
// Memory-bound: each thread reads kItems vectors of kVecElems inputs (16-byte
// accesses at best), evaluates them and writes the outputs. The table lives in
// shared memory (kTableInShared) or is read from global memory through L1.

using namespace qjit_spec;

constexpr long long kChunk = static_cast<long long>(kThreads) * kItems * kVecElems;  // elements per block

template <typename T, int N>
__device__ __forceinline__ void store_from_f32(T* p, const float (&v)[N]) {
  T out[N];
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = qjit::from_f32<T>(v[i]);
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  constexpr int kChunkBytes = kBytes < 16 ? kBytes : 16;
#pragma unroll
  for (int c = 0; c < kBytes / kChunkBytes; ++c)
    reinterpret_cast<typename qjit::RawVec<kChunkBytes>::type*>(p)[c] =
        reinterpret_cast<const typename qjit::RawVec<kChunkBytes>::type*>(out)[c];
}

__device__ __forceinline__ float evaluate(float x, const unsigned short* table) {
  return qjit::clamp_fp16_range(qjit::lut_eval<Lut>(x, table));
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) qjit_fp_lut(const TIn* __restrict__ x, TOut* __restrict__ y) {
  const unsigned short* table = Lut::kTable;
  if constexpr (kTableInShared) {
    __shared__ unsigned short shared_table[259];
    for (int i = threadIdx.x; i < 259; i += kThreads) shared_table[i] = Lut::kTable[i];
    __syncthreads();
    table = shared_table;
  }
  const long long block0 = blockIdx.x * kChunk;
  float in[kItems][kVecElems];
  bool full[kItems];
  // All loads first, then the arithmetic: kItems vectors in flight per thread.
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const long long i0 = block0 + (static_cast<long long>(it) * kThreads + threadIdx.x) * kVecElems;
    full[it] = i0 + kVecElems <= kN;
    if (full[it]) qjit::load_f32<TIn, kVecElems, true>(x + i0, in[it]);
  }
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const long long i0 = block0 + (static_cast<long long>(it) * kThreads + threadIdx.x) * kVecElems;
    if (full[it]) {
      float out[kVecElems];
#pragma unroll
      for (int e = 0; e < kVecElems; ++e) out[e] = evaluate(in[it][e], table);
      store_from_f32<TOut, kVecElems>(y + i0, out);
    } else {
      for (long long i = i0; i < kN; ++i) y[i] = qjit::from_f32<TOut>(evaluate(qjit::to_f32(x[i]), table));
    }
  }
}
