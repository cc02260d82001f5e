#pragma once
// Reading qjit's native quantized layout and dequantising it in registers:
// the part of the weight-quantized kernels that does not depend on how work
// is split. Included by wq_mma_mainloop.cuh (the small-M mainloop, wq_gemm and
// the quantized fused_ffn) and wq_gemm_tiled.cu (large M).
//
// Reads from the generated qjit_spec: TS, kK, kN, kBits, kGroup, kZeroMode.
//
// W is the A operand of mma.m16n8k16 (16 rows of n × 16 of k), x the B operand
// (16 of k × 8 rows of x). The native layout (tuner/reference/wq_gemm.h)
// stores, for each tile of 16 rows × 64 k, each lane's A fragments of the 4
// mma steps as kBits words: lane (gq, t) of register R = 4s + r holds rows
// gq + 8(r%2) and physical k = 16t + 2s + 8(r/2) + {0, 1}, its vectors at
// slot native_slot(lane) of the tile. x[m][16t .. 16t+16) is the lane's 16
// values as 8 B fragment words (k pairs 16t + 2i), and the mma's step s
// takes words 2s and 2s + 1, adjacent registers as a 16-byte load leaves
// them (mma's B operand is a register pair: words s and s + 4 cost ptxas
// ~100 moves per two chunk pairs at M = 16). Its A fragments are the
// registers that hold those k pairs (a_reg).
//
// Dequantisation (fp16 scales): one lop3 masks a register's two quantised
// values into the two fp16 mantissas under 0x6400 (1024 + q·2^r exactly), one
// fma makes them q - z (exact: small integers), and one mul.rn by the scale
// rounds once, as the reference's w rounded to fp16 (or the caller multiplies
// q - z and scales the sums: dequant2<true>). bf16 scales go through fp32
// (bf16 has too few bits for 128 + q when q needs 8 bits).

using namespace qjit_spec;

constexpr int kChunks = kK / 64;
constexpr int kNTiles = kN / 16;
constexpr int kMid = 1 << (kBits - 1);
constexpr int kVec = kBits % 4 == 0 ? 4 : kBits == 2 ? 2 : 1;  // words per load
constexpr bool kHalf = !qjit::IsBf16<TS>::value;
constexpr int kGroupsPerChunk = kGroup < 64 ? 64 / kGroup : 1;
constexpr int kZeroBytes = kZeroMode == 1 ? 1 : kZeroMode == 2 ? 2 : 0;
static_assert(kK % 64 == 0 && kN % 16 == 0, "native tiles are 16 x 64");

// --- the native layout's places ----------------------------------------------

// Where lane `lane`'s vectors sit among a tile's 32 (the layout's XOR, which
// keeps shared-memory reads of a tile free of bank conflicts; an involution).
__device__ __forceinline__ int native_slot(int lane) { return lane ^ ((lane >> 3) & 3); }

// The register of the lane's 16 that holds k pair i (k 16t + 2i + {0, 1}) of
// row gq + 8·row: step i % 4, r = 2(i / 4) + row.
__device__ constexpr int reg_of_pair(int i, int row) { return 4 * (i % 4) + 2 * (i / 4) + row; }

// The register that is A fragment r (a0..a3: rows gq, gq + 8 at the step's
// first k pair, then at its second) of mma step s when the step multiplies
// x's k pairs 2s and 2s + 1 (B words 2s and 2s + 1).
__device__ constexpr int a_reg(int s, int r) { return reg_of_pair(2 * s + r / 2, r % 2); }

// --- loads ---------------------------------------------------------------

// The lane's kBits words of one tile, in kBits / kVec vector loads read once
// (L1::no_allocate: weights are streamed, L1 is left to x).
__device__ __forceinline__ void load_tile(const unsigned* __restrict__ tile, int lane, unsigned (&w)[kBits]) {
  const int slot = native_slot(lane);
#pragma unroll
  for (int v = 0; v < kBits / kVec; ++v) {
    const unsigned* p = tile + (v * 32 + slot) * kVec;
    if constexpr (kVec == 4) {
      const uint4 r = qjit::load_raw16<true>(p);
      w[4 * v] = r.x, w[4 * v + 1] = r.y, w[4 * v + 2] = r.z, w[4 * v + 3] = r.w;
    } else if constexpr (kVec == 2) {
      uint2 r;
      asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
      w[2 * v] = r.x, w[2 * v + 1] = r.y;
    } else {
      asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(w[v]) : "l"(p));
    }
  }
}

// Two 16-bit values in mma input type TS, from two floats (lo in the low half).
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  unsigned r;
  if constexpr (kHalf) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

template <typename T> __device__ __forceinline__ float widen16(unsigned short bits);
template <> __device__ __forceinline__ float widen16<qjit::half_t>(unsigned short b) { return qjit::to_f32(qjit::half_t{b}); }
template <> __device__ __forceinline__ float widen16<qjit::bf16_t>(unsigned short b) { return qjit::to_f32(qjit::bf16_t{b}); }

// 16 values of x of 16-bit type T (two 16-byte pieces) as 8 B fragment words
// of type TS: as they are when the types agree, else through fp32.
template <typename T>
__device__ __forceinline__ void b_from_16bit(uint4 lo, uint4 hi, unsigned (&b)[8]) {
  const unsigned raw[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  constexpr bool kSame = qjit::IsBf16<T>::value == qjit::IsBf16<TS>::value;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if constexpr (kSame) b[i] = raw[i];
    else b[i] = pack2(widen16<T>(raw[i] & 0xffffu), widen16<T>(raw[i] >> 16));
  }
}

// --- dequantisation ----------------------------------------------------------
// --- dequantisation ----------------------------------------------------------

// fp16 extraction. A b-bit field at bit sh of a 16-bit half, ORed into
// 0x6400 (fp16 1024, ulp 1), reads as 1024 + q·2^sh as long as it stays in the
// 10 mantissa bits (sh + b <= 10). So fields up to kInPlace are masked in
// place (one lop3 for both halves), and the rest come from the word shifted
// right by kPreShift (one shift per word, shared by its registers).
// 8-bit uses prmt instead: bytes 0/2 or 1/3 next to 0x64 bytes give 1024 + q.
constexpr int kPer = 16 / (kBits == 3 ? 2 : kBits);  // fields per 16-bit half
constexpr int kInPlace = 10 - kBits;
constexpr int kPreShift = kBits * ((10 - kBits) / kBits + 1);  // first field position that does not fit

// Register R's two quantised values, lo in bits 0..15 and hi in bits 16..31
// (field rules in tuner/reference/wq_gemm.h). R is a constant once the
// callers' loops are unrolled.
__device__ __forceinline__ unsigned fields(const unsigned (&w)[kBits], int R) {
  if constexpr (kBits == 3) {
    const unsigned lo2 = (w[R / 8] >> (2 * (R % 8))) & 0x00030003u;
    const unsigned bit2 = (w[2] >> R) & 0x00010001u;
    return lo2 | (bit2 << 2);
  } else {
    constexpr unsigned kMask = ((1u << kBits) - 1) * 0x00010001u;
    return (w[R / kPer] >> (kBits * (R % kPer))) & kMask;
  }
}

// The r of register R in magic_fields (known at compile time).
__device__ constexpr int magic_shift(int R) {
  if (kBits == 8 || kBits == 3) return 0;
  const int sh = kBits * (R % kPer);
  return sh <= kInPlace ? sh : sh - kPreShift;
}

// fp16 only: register R as two fp16 numbers 1024 + q·2^r; returns r.
__device__ __forceinline__ int magic_fields(const unsigned (&w)[kBits], int R, unsigned& v) {
  if constexpr (kBits == 8) {
    v = __byte_perm(w[R / 2], 0x64646464u, R % 2 ? 0x4341 : 0x4240);
    return 0;
  } else if constexpr (kBits == 3) {
    v = fields(w, R) | 0x64006400u;
    return 0;
  } else {
    constexpr unsigned kMask = ((1u << kBits) - 1) * 0x00010001u;
    const int sh = kBits * (R % kPer);
    const int r = sh <= kInPlace ? sh : sh - kPreShift;
    const unsigned word = sh <= kInPlace ? w[R / kPer] : w[R / kPer] >> kPreShift;
    // (word & mask) | magic as one lop3, the magic its immediate and the mask
    // in a register; written in C it compiles to two (a SASS lop3 takes one immediate).
    asm("lop3.b32 %0, %1, %2, 0x64006400, 0xea;" : "=r"(v) : "r"(word), "r"(kMask << r));
    return r;
  }
}

// fp16 bits of an integer 0 <= v < 2048 (exact), at compile time.
__device__ constexpr unsigned fp16_of_int(int v) {
  int e = 0;
  while (e < 10 && (v >> (e + 1))) ++e;
  return v == 0 ? 0u : static_cast<unsigned>((e + 15) << 10 | ((v << (10 - e)) & 0x3ff));
}

// Per-row dequantisation parameters of one chunk, prepared once per chunk.
//   fp16: zr[r/2] = half2(-(1024/2^r + zero)) (zero = z or 2^(b-1)) for the
//         field positions r (0, 2, ..., 8), s2 = half2(s), o2 = half2(o)
//   bf16: fp32 zero, scale, offset
//   sf:   the scale in fp32 (for sums of q - zero)
struct RowParams {
  unsigned zr[5], s2, o2;
  float zf, sf, of;
};

// Raw per-row quantisation parameters of a chunk, as loaded: the scale's
// bits and the zero byte or the offset's bits (unused by sym).
struct RowRaw {
  unsigned short s, zo;
};

__device__ __forceinline__ RowRaw load_row(const TS* __restrict__ scales, const void* __restrict__ zeros, int group,
                                           int n) {
  const long long at = static_cast<long long>(group) * kN + n;
  RowRaw r{__ldg(reinterpret_cast<const unsigned short*>(scales) + at), 0};
  if constexpr (kZeroMode == 1) r.zo = __ldg(static_cast<const unsigned char*>(zeros) + at);
  if constexpr (kZeroMode == 2) r.zo = __ldg(static_cast<const unsigned short*>(zeros) + at);
  return r;
}

__device__ __forceinline__ RowParams row_params(RowRaw r) {
  RowParams p;
  const int zero = kZeroMode == 1 ? r.zo : kMid;
  const unsigned short o = kZeroMode == 2 ? r.zo : 0;
  if constexpr (kHalf) {
    // fp16 1024 + zero in both halves: bytes zero, 0x64, zero, 0x64 (zero < 256), one prmt.
    const unsigned zq = __byte_perm(static_cast<unsigned>(zero), 0x64u, 0x4040);
#pragma unroll
    for (int i = 0; i < 5; ++i) {
      // (1024 - 1024/2^r) - (1024 + zero), every term an integer below 2048: exact.
      const unsigned c = fp16_of_int(1024 - (1024 >> (2 * i))) * 0x00010001u;
      asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(p.zr[i]) : "r"(c), "r"(zq));
    }
    p.s2 = r.s * 0x00010001u;
    p.o2 = o * 0x00010001u;
    p.zf = static_cast<float>(zero);  // for kZeroAfter (unused, and dropped, otherwise)
  } else {
    p.zf = static_cast<float>(zero);
    p.of = widen16<TS>(o);
  }
  p.sf = widen16<TS>(r.s);
  return p;
}

// One A register: the two weights (or, with kQMinusZero, the two q - zero)
// of register R with row parameters p.
template <bool kQMinusZero>
__device__ __forceinline__ unsigned dequant2(const unsigned (&w)[kBits], int R, const RowParams& p) {
  if constexpr (kHalf) {
    unsigned v, d, out;
    const int r = magic_fields(w, R, v);
    // v·2^-r - (1024/2^r + zero) = q - zero, exact (one rounding of an exact value).
    const unsigned k = ((15u - r) << 10) * 0x00010001u;  // fp16 2^-r in both halves
    // A select chain, not zr[r / 2]: an array indexed before unrolling lands in local memory.
    const unsigned zr = r == 0 ? p.zr[0] : r == 2 ? p.zr[1] : r == 4 ? p.zr[2] : r == 6 ? p.zr[3] : p.zr[4];
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(v), "r"(k), "r"(zr));
    if constexpr (kQMinusZero) return d;
    if constexpr (kZeroMode == 2) asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(out) : "r"(d), "r"(p.s2), "r"(p.o2));
    else asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out) : "r"(d), "r"(p.s2));
    return out;
  } else {
    const unsigned f = fields(w, R);
    // 2^23 + q as fp32 bits, minus 2^23: exact int -> float for q < 2^16.
    const float lo = __uint_as_float(0x4b000000u | (f & 0xffffu)) - 8388608.0f;
    const float hi = __uint_as_float(0x4b000000u | (f >> 16)) - 8388608.0f;
    if constexpr (kQMinusZero) return pack2(lo - p.zf, hi - p.zf);  // |q - z| <= 255: exact in bf16
    else if constexpr (kZeroMode == 2) return pack2(fmaf(lo - p.zf, p.sf, p.of), fmaf(hi - p.zf, p.sf, p.of));
    else return pack2((lo - p.zf) * p.sf, (hi - p.zf) * p.sf);
  }
}
