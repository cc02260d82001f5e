#pragma once
// What the qconv2d kernels share: the packed weights' codes, the quantization
// parameters' places and the epilogue (bias, clamp, store in x's layout).
// Reads from the generated qjit_spec: TX, the shape constants, kBits, kBlock,
// kHasBias, kAct, kNhwc.

using namespace qjit_spec;

constexpr int kGroups = kCi / kBlock;          // (scale, offset) pairs per output channel
constexpr int kK = kKh * kKw * kCi;            // GEMM depth: one filter window
constexpr int kRowBytes = kK * kBits / 8;      // packed bytes of one output channel's weights
constexpr int kOutPoints = kOh * kOw;          // output points of one image

// Code of input channel c (any c) from its byte: int8 as stored; int4 holds
// channel 2j in the high nibble and 2j + 1 in the low one, each as code + 8
// (the seed's ker0 = (byte >> 4) − 8, ker1 = (byte & 15) − 8).
__device__ __forceinline__ int int4_code(unsigned byte, int c) {
  return static_cast<int>(c % 2 ? (byte & 15u) : (byte >> 4) & 15u) - 8;
}

// w = q·s + o in fp32 with one fused rounding, as the seed computes it
// ((float)ker * x_scale + x_offset, contracted to an fma by nvcc).
__device__ __forceinline__ float dequant(int q, float s, float o) { return fmaf(static_cast<float>(q), s, o); }

// Two fp16 in one register, lo in bits 0..15, each rounded to nearest even.
__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// bias, clamp, y[b][co][oy][ox] (nchw) or y[b][oy][ox][co] (nhwc); point =
// the output point's index b·kOh·kOw + oy·kOw + ox.
__device__ __forceinline__ void store_output(TX* __restrict__ y, const float* __restrict__ bias, int point, int co,
                                             float acc) {
  if constexpr (kHasBias) acc += __ldg(bias + co);
  if constexpr (kAct >= 1) acc = fmaxf(acc, 0.0f);
  if constexpr (kAct == 2) acc = fminf(acc, 6.0f);
  const int at = kNhwc ? point * kCo + co : (point / kOutPoints * kCo + co) * kOutPoints + point % kOutPoints;
  y[at] = qjit::from_f32<TX>(acc);
}
