// qconv2d, the direct kernel: seed 002's CONV_FpAInt4B structure, kept as the
// obviously-correct baseline. One thread per output point (b, co, oy, ox), no
// tiling, no shared memory, no tensor cores: for every filter tap inside the
// input and every block of input channels, it reads the block's (scale,
// offset) once and adds x · (q·s + o) for each channel, in fp32.
//
// Thread order: nhwc, co fastest (the seed's: a warp reads one input point
// and writes 32 consecutive outputs); nchw, ox fastest (a warp reads and
// writes along a row). The weights are the seed's packed OHWI rows
// (codegen/ops/qconv2d.h).
#include "qjit/qconv2d/qconv2d_common.cuh"

constexpr long long kPoints = static_cast<long long>(kBatch) * kCo * kOutPoints;

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_qconv2d_direct(const TX* __restrict__ x, const unsigned char* __restrict__ qweight,
                    const float* __restrict__ scales, const float* __restrict__ offsets,
                    const float* __restrict__ bias, TX* __restrict__ y) {
  const long long index = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= kPoints) return;
  const int i = static_cast<int>(index);
  int co, point;  // point = b·kOh·kOw + oy·kOw + ox
  if constexpr (kNhwc) {
    co = i % kCo, point = i / kCo;
  } else {
    const int b = i / (kCo * kOutPoints), rest = i % (kCo * kOutPoints);
    co = rest / kOutPoints, point = b * kOutPoints + rest % kOutPoints;
  }
  const int b = point / kOutPoints, oy = point % kOutPoints / kOw, ox = point % kOw;
  const int iy0 = oy * kStrideH - kPadH, ix0 = ox * kStrideW - kPadW;
  float acc = 0.0f;
  for (int fy = 0; fy < kKh; ++fy) {
    const int iy = iy0 + fy * kDilH;
    if (iy < 0 || iy >= kH) continue;  // zero padding: the tap adds nothing
    for (int fx = 0; fx < kKw; ++fx) {
      const int ix = ix0 + fx * kDilW;
      if (ix < 0 || ix >= kW) continue;
      const int tap = fy * kKw + fx;
      const unsigned char* wrow = qweight + static_cast<long long>(co) * kRowBytes + tap * kCi * kBits / 8;
      for (int g = 0; g < kGroups; ++g) {
        const float s = __ldg(scales + co * kGroups + g), o = __ldg(offsets + co * kGroups + g);
#pragma unroll 4
        for (int c = g * kBlock; c < (g + 1) * kBlock; ++c) {
          const int q = kBits == 8 ? static_cast<int>(static_cast<signed char>(__ldg(wrow + c)))
                                   : int4_code(__ldg(wrow + c / 2), c);
          const float xv = qjit::to_f32(kNhwc ? x[((b * kH + iy) * kW + ix) * kCi + c]
                                              : x[((b * kCi + c) * kH + iy) * kW + ix]);
          acc = fmaf(xv, dequant(q, s, o), acc);
        }
      }
    }
  }
  store_output(y, bias, point, co, acc);
}
