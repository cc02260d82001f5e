// awq_dequant: w[k][n] = (q[k][n] - z[k/g][n]) * s[k/g][n], rounded once to TO.
// (q - z) is an exact small integer and its product with a 16-bit scale is
// exact in fp32, so the only rounding is the final one: results equal the CPU
// reference bit for bit. Layouts (tuner/reference/awq_dequant.h):
//   awq:  qweight int32 [K, N/8]; nibble i (bits 4i..4i+3) of word (k, c)
//         holds column 8c + kAwqOrder[i]; qzeros int32 [K/g, N/8] the same way.
//   gptq: qweight int32 [K/8, N]; nibble i of word (r, n) holds row 8r + i;
//         qzeros int32 [K/g, N/8] packed along n in plain order (nibble i ->
//         column 8c + i); kSymmetric: every zero point is 8.
//   scales [K/g, N] of TS; out [K, N] of TO (fp16 or bf16, either way), row-major.
// One unit of work: awq, one qweight word -> 8 consecutive outputs of a row
// (one 16-byte store); gptq, an 8x8 block: 8 words (32 contiguous bytes) of
// a packed row -> 8 rows of 8 outputs. Each thread handles kItems units, all
// loaded (into registers) before it stores any, so that all their loads are
// in flight at once.

using namespace qjit_spec;

// The AWQ packer's interleave: nibble i holds column kAwqOrder[i] of its 8.
__device__ constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

__device__ __forceinline__ int nibble(unsigned word, int i) { return static_cast<int>((word >> (4 * i)) & 0xfu); }

// 8 outputs of one row from quantized values q[j] and zeros z[j], column j.
__device__ __forceinline__ uint4 dequant8(const int (&q)[8], const int (&z)[8], const TS (&s)[8]) {
  uint4 out;
  unsigned short* o = reinterpret_cast<unsigned short*>(&out);
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = qjit::from_f32<TO>(static_cast<float>(q[j] - z[j]) * qjit::to_f32(s[j])).bits;
  return out;
}

__device__ __forceinline__ void store16(TO* p, uint4 v) {
  if constexpr (kStreamStores) __stcs(reinterpret_cast<uint4*>(p), v);
  else *reinterpret_cast<uint4*>(p) = v;
}

// One unit's packed inputs as raw bits, read before they are needed: its
// weight words (awq: lo.x alone; gptq: lo and hi, the words of columns
// 8c..8c+7), its zeros' word (unused when kSymmetric) and its 8 scales.
struct Packed {
  uint4 lo, hi;
  unsigned zeros;
  uint4 scales;
};

__device__ __forceinline__ int unit_row(long long unit) { return static_cast<int>(unit / (kN / 8)); }
__device__ __forceinline__ int unit_col(long long unit) { return static_cast<int>(unit % (kN / 8)); }
// The group of a unit: awq, that of its row k; gptq, that of its 8 rows 8r..8r+7
// (kGroup is a multiple of 8: one group for all of them).
__device__ __forceinline__ int unit_group(long long unit) {
  return (kAwqLayout ? unit_row(unit) : 8 * unit_row(unit)) / kGroup;
}

__device__ __forceinline__ Packed load_unit(const unsigned* __restrict__ qweight, const unsigned* __restrict__ qzeros,
                                            const TS* __restrict__ scales, long long unit) {
  Packed p;
  const int c = unit_col(unit), group = unit_group(unit);
  if constexpr (kAwqLayout) {
    p.lo.x = __ldcs(qweight + unit);  // read once
  } else {
    const uint4* src = reinterpret_cast<const uint4*>(qweight + static_cast<long long>(unit_row(unit)) * kN + 8 * c);
    p.lo = __ldcs(src);
    p.hi = __ldcs(src + 1);
  }
  if constexpr (!kSymmetric) p.zeros = __ldg(qzeros + static_cast<long long>(group) * (kN / 8) + c);
  p.scales = __ldg(reinterpret_cast<const uint4*>(scales + static_cast<long long>(group) * kN + 8 * c));
  return p;
}

__device__ __forceinline__ void store_unit(TO* __restrict__ out, long long unit, const Packed& p) {
  const int r = unit_row(unit), c = unit_col(unit);
  int q[8], z[8];
  TS s[8];
  const TS* sv = reinterpret_cast<const TS*>(&p.scales);
#pragma unroll
  for (int j = 0; j < 8; ++j) s[j] = sv[j];
#pragma unroll
  for (int i = 0; i < 8; ++i) z[kAwqLayout ? kAwqOrder[i] : i] = kSymmetric ? 8 : nibble(p.zeros, i);
  if constexpr (kAwqLayout) {
#pragma unroll
    for (int i = 0; i < 8; ++i) q[kAwqOrder[i]] = nibble(p.lo.x, i);
    store16(out + static_cast<long long>(r) * kN + 8 * c, dequant8(q, z, s));
  } else {
    const unsigned words[8] = {p.lo.x, p.lo.y, p.lo.z, p.lo.w, p.hi.x, p.hi.y, p.hi.z, p.hi.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // row 8r + i
#pragma unroll
      for (int j = 0; j < 8; ++j) q[j] = nibble(words[j], i);
      store16(out + static_cast<long long>(8 * r + i) * kN + 8 * c, dequant8(q, z, s));
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_awq_dequant(const unsigned* __restrict__ qweight, const unsigned* __restrict__ qzeros,
                 const TS* __restrict__ scales, TO* __restrict__ out) {
  const long long first = (static_cast<long long>(blockIdx.x) * kItems) * kThreads + threadIdx.x;
  // Programmatic dependent launch (qjit_common.cuh): the next kernel may
  // start now; this one reads its packed units before waiting for the
  // previous kernel, and stores only after.
  qjit::allow_next_grid();
  Packed held[kItems];
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const long long unit = first + it * kThreads;
    if (unit < kUnits) held[it] = load_unit(qweight, qzeros, scales, unit);
  }
  qjit::wait_for_previous_grid();
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const long long unit = first + it * kThreads;
    if (unit < kUnits) store_unit(out, unit, held[it]);
  }
}
