// w8a8_gemm's promotion of one block's exact int32 product to float and the
// epilogue, shared by its GEMM kernels.
//
// Block i of k contributes (seed 002's DequantAndAcc, tuner/reference/w8a8_gemm.h)
//   sA·sB·Cq + sA·oB·ΣA + oA·sB·ΣB + K_i·oA·oB
//   = sA·(sB·Cq + oB·ΣA) + oA·cB,   cB = sB·ΣB + K_i·oB  (per column and block),
// with s, o, Σ the scale, offset and code sum of A's row and W's column in
// that block. A symmetric side has no offsets and its terms vanish. |Cq| ≤
// 2^23 (block ≤ 512), so the conversion to float is exact; the float32
// roundings are what w8a8_tolerance bounds.
//
// e4m3 codes (kFp8) have no offsets: block i contributes sA·sB·P with P the
// block's fp32 sum of products (w8a8_add_fp8_block), sB the scale of W's
// 128 × 128 tile; w8a8_fp8_tolerance bounds P's and the promotion's roundings.

// A block's partial products in the GEMM kernels' registers: exact int32
// sums of int8 codes, or the fp32 sums of the e4m3 tensor cores.
template <bool kFloat>
struct W8a8PartOf {
  using T = int;
};
template <>
struct W8a8PartOf<true> {
  using T = float;
};
using W8a8Part = typename W8a8PartOf<kFp8>::T;

// The GEMM kernels' inputs: x's codes and block parameters from the
// quantization kernel, W's codes and block parameters.
struct W8a8Operands {
  const signed char* codes;
  const float *a_scale, *a_offset;
  const int* a_sum;
  const signed char* wq;
  const float *w_scale, *w_offset;
  const int* w_sum;
};

struct W8a8RowParams {
  float scale, offset, sum;  // A's, for one row and block (sum as float: exact, |ΣA| ≤ 2^16)
};
struct W8a8ColParams {
  float scale, offset, c;  // W's scale and offset, and cB
};

__device__ __forceinline__ W8a8ColParams w8a8_col_params(float scale, float offset, int sum) {
  W8a8ColParams p{scale, 0.0f, 0.0f};
  if constexpr (kOffsetW) p.offset = offset;
  if constexpr (kOffsetA) p.c = kOffsetW ? __fmaf_rn(static_cast<float>(kBlock), offset, scale * static_cast<float>(sum))
                                         : scale * static_cast<float>(sum);
  return p;
}

// cq as a float, exactly. I2F issues at a quarter of the FP32 rate on sm_80
// and sm_90, and a block's promotion converts every accumulator: for |cq| ≤
// 2^22 (blocks of at most 256 codes: |cq| ≤ 128·128·256) the bits of
// 1.5·2^23 + cq are cq added to those of 1.5·2^23 (the sum stays in
// [2^23, 2^24], one exponent, or exactly 2^24), and one exact FADD removes
// the bias: two full-rate instructions.
__device__ __forceinline__ float w8a8_exact_float(int cq) {
  if constexpr (kBlock <= 256) {
    constexpr int kMagicBits = 0x4B400000;  // 1.5 · 2^23
    return __fsub_rn(__int_as_float(kMagicBits + cq), 12582912.0f);
  } else {
    return static_cast<float>(cq);
  }
}

// acc + block's contribution.
__device__ __forceinline__ float w8a8_add_block(float acc, int cq, const W8a8RowParams& a, const W8a8ColParams& w) {
  const float v = w8a8_exact_float(cq);
  const float t = kOffsetW ? __fmaf_rn(w.scale, v, w.offset * a.sum) : w.scale * v;
  acc = __fmaf_rn(a.scale, t, acc);
  if constexpr (kOffsetA) acc = __fmaf_rn(a.offset, w.c, acc);
  return acc;
}

// acc + one e4m3 block's contribution: (sA·sB)·P, P the block's fp32 sum of products.
__device__ __forceinline__ float w8a8_add_fp8_block(float acc, float p, float sa, float sb) {
  return __fmaf_rn(__fmul_rn(sa, sb), p, acc);
}

// The value of e4m3 code c, exactly: normal codes move their exponent
// (bias 7) and 3 mantissa bits into a float's (bias 127); subnormals are
// m·2^-9; S.1111.111 is NaN.
__device__ __forceinline__ float e4m3_value(unsigned char c) {
  const unsigned e = (c >> 3) & 15u, m = c & 7u;
  float v = e == 0 ? static_cast<float>(m) * 0x1p-9f : __uint_as_float(((e + 120u) << 23) | (m << 20));
  if (e == 15 && m == 7) v = __uint_as_float(0x7fc00000u);
  return (c & 0x80) ? -v : v;
}

// y's value from v and its column's bias value b (read only with kBias):
// + b, then the clamp.
__device__ __forceinline__ float w8a8_finish_value(float v, float b) {
  if constexpr (kBias) v += b;
  if constexpr (kAct >= 1) v = fmaxf(v, 0.0f);
  if constexpr (kAct == 2) v = fminf(v, 6.0f);
  return v;
}

// y's value at column n: + bias[n], then the clamp.
__device__ __forceinline__ float w8a8_finish(float v, const TX* __restrict__ bias, int n) {
  return w8a8_finish_value(v, kBias ? qjit::to_f32(bias[n]) : 0.0f);
}
