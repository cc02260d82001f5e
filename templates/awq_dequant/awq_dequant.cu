// awq_dequant: w[k][n] = (q[k][n] - z[k/g][n]) * s[k/g][n], rounded once to TS.
// (q - z) is an exact small integer and its product with a 16-bit scale is
// exact in fp32, so the only rounding is the final one: results equal the CPU
// reference bit for bit. Layouts (tuner/reference/awq_dequant.h):
//   awq:  qweight int32 [K, N/8]; nibble i (bits 4i..4i+3) of word (k, c)
//         holds column 8c + kAwqOrder[i]; qzeros int32 [K/g, N/8] the same way.
//   gptq: qweight int32 [K/8, N]; nibble i of word (r, n) holds row 8r + i;
//         qzeros int32 [K/g, N/8] packed along n in plain order (nibble i ->
//         column 8c + i); kSymmetric: every zero point is 8.
//   scales [K/g, N] of TS; out [K, N] of TS, row-major.
// One unit of work: awq, one qweight word -> 8 consecutive outputs of a row
// (one 16-byte store); gptq, an 8x8 block: 8 words (32 contiguous bytes) of
// a packed row -> 8 rows of 8 outputs. Each thread handles kItems units.

using namespace qjit_spec;

// The AWQ packer's interleave: nibble i holds column kAwqOrder[i] of its 8.
__device__ constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

__device__ __forceinline__ int nibble(unsigned word, int i) { return static_cast<int>((word >> (4 * i)) & 0xfu); }

// 8 outputs of one row from quantized values q[j] and zeros z[j], column j.
__device__ __forceinline__ uint4 dequant8(const int (&q)[8], const int (&z)[8], const TS (&s)[8]) {
  uint4 out;
  unsigned short* o = reinterpret_cast<unsigned short*>(&out);
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = qjit::from_f32<TS>(static_cast<float>(q[j] - z[j]) * qjit::to_f32(s[j])).bits;
  return out;
}

__device__ __forceinline__ void load_scales(const TS* __restrict__ scales, int group, int col0, TS (&s)[8]) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(scales + static_cast<long long>(group) * kN + col0));
  const TS* v = reinterpret_cast<const TS*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) s[j] = v[j];
}

// Zero points of columns 8c..8c+7 in group `group` (interleaved: the AWQ order).
__device__ __forceinline__ void load_zeros(const unsigned* __restrict__ qzeros, int group, int c, bool interleaved,
                                           int (&z)[8]) {
  if constexpr (kSymmetric) {
#pragma unroll
    for (int j = 0; j < 8; ++j) z[j] = 8;
  } else {
    const unsigned word = __ldg(qzeros + static_cast<long long>(group) * (kN / 8) + c);
#pragma unroll
    for (int i = 0; i < 8; ++i) z[interleaved ? kAwqOrder[i] : i] = nibble(word, i);
  }
}

__device__ __forceinline__ void store16(TS* p, uint4 v) {
  if constexpr (kStreamStores) __stcs(reinterpret_cast<uint4*>(p), v);
  else *reinterpret_cast<uint4*>(p) = v;
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_awq_dequant(const unsigned* __restrict__ qweight, const unsigned* __restrict__ qzeros,
                 const TS* __restrict__ scales, TS* __restrict__ out) {
  const long long first = (static_cast<long long>(blockIdx.x) * kItems) * kThreads + threadIdx.x;
  // Programmatic dependent launch (qjit_common.cuh): the next kernel may
  // start now; this one reads its first packed words before waiting for the
  // previous kernel, and stores only after.
  qjit::allow_next_grid();
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const long long unit = first + static_cast<long long>(it) * kThreads;
    if (unit >= kUnits) return;
    int q[8], z[8];
    TS s[8];
    if constexpr (kAwqLayout) {
      const int k = static_cast<int>(unit / (kN / 8)), c = static_cast<int>(unit % (kN / 8));
      const unsigned word = __ldcs(qweight + unit);  // read once
#pragma unroll
      for (int i = 0; i < 8; ++i) q[kAwqOrder[i]] = nibble(word, i);
      load_zeros(qzeros, k / kGroup, c, true, z);
      load_scales(scales, k / kGroup, 8 * c, s);
      if (it == 0) qjit::wait_for_previous_grid();
      store16(out + static_cast<long long>(k) * kN + 8 * c, dequant8(q, z, s));
    } else {
      const int r = static_cast<int>(unit / (kN / 8)), c = static_cast<int>(unit % (kN / 8));
      const uint4* src = reinterpret_cast<const uint4*>(qweight + static_cast<long long>(r) * kN + 8 * c);
      const uint4 lo = __ldcs(src), hi = __ldcs(src + 1);
      const unsigned words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};  // columns 8c..8c+7
      const int group = 8 * r / kGroup;  // kGroup is a multiple of 8: one group for the 8 rows
      load_zeros(qzeros, group, c, false, z);
      load_scales(scales, group, 8 * c, s);
      if (it == 0) qjit::wait_for_previous_grid();
#pragma unroll
      for (int i = 0; i < 8; ++i) {  // row 8r + i
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = nibble(words[j], i);
        store16(out + static_cast<long long>(8 * r + i) * kN + 8 * c, dequant8(q, z, s));
      }
    }
  }
}
