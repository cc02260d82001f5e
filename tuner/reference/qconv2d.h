// qconv2d on the CPU: seed 002's CONV_FpAInt4B (and its int8 twin) as a
// float64 reference, the output size rule, and the seed's weight layouts.
//
// y[b][co][oy][ox] = clamp( bias[co] + Σ_{fy, fx, ci} x[b][ci][iy][ix] · w[co][ci][fy][fx] ),
//   iy = oy·stride_h − pad_h + fy·dil_h, ix likewise; taps outside the input
//   are skipped (zero padding, as the seed's fySta..fyEnd bounds do);
//   w = q · scale[co][ci / block] + offset[co][ci / block]
// with q the code: int8 as stored, int4 the nibble − 8 (so −8 .. 7). One
// (scale, offset) pair covers a block of input channels over the whole Kh×Kw
// window (the seed's quan_param_index = oz · groups + group_idx). block = Ci
// is per-channel quantization. Accumulation and w are float64.
//
// Layouts: x is [N][Ci][H][W] (nchw) or [N][H][W][Ci] (nhwc); y has the same
// layout as x ([N][Co][Oh][Ow] or [N][Oh][Ow][Co]). The seed's kernel indexes
// its input and output channels-last despite its text's NCHW.
//
// Weights in the seed's kernel layout: [Co][Kh][Kw][Ci] (reordered from the
// model's [Co][Ci][Kh][Kw] so that a thread reads Ci contiguously). int4 packs
// two consecutive input channels per byte: channel 2j in the HIGH nibble,
// channel 2j + 1 in the low one, each stored as code + 8 (the seed unpacks
// ker0 = (byte >> 4) − 8 for channel 2·sz and ker1 = (byte & 15) − 8 for
// 2·sz + 1). The seed pads Ci to ic_p; here Ci must be even for int4 and the
// packed row is Ci / 2 bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qjit::tuner {

struct Conv2dShape {
  int64_t batch = 1, ci = 1, h = 1, w = 1;  // input
  int64_t co = 1, kh = 1, kw = 1;           // weights
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  std::string layout = "nchw";  // or "nhwc"
};

// (in + 2·pad − dil·(k − 1) − 1) / stride + 1, rounded down (PyTorch's and
// cuDNN's rule; the seed's bounds loop assumes it). Throws
// qjit::Error("spec", ...) naming `axis` for stride < 1, pad < 0, dil < 1,
// k < 1, or an empty output.
int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, const char* axis);

struct QConvWeights {
  int bits = 8;                      // 4 or 8
  int64_t block = 0;                 // input channels per quantization block; divides Ci
  std::vector<int8_t> q;             // codes [Co][Ci][Kh][Kw] (the model's layout); int4: −8 .. 7
  std::vector<float> scale, offset;  // [Co][Ci / block]
};

// Checks shape and weights together (sizes, block | Ci, int4: even block,
// codes in range, act). Throws qjit::Error naming the bad value.
void check_qconv2d(const Conv2dShape& s, const QConvWeights& w, const std::vector<float>& bias, const std::string& act);

// The reference. x: float32 in s.layout ([N][Ci][H][W] or [N][H][W][Ci]); bias
// [Co] or empty; act "none", "relu", "relu6". Result in s.layout.
std::vector<double> qconv2d_reference(const Conv2dShape& s, const std::vector<float>& x, const QConvWeights& w,
                                      const std::vector<float>& bias, const std::string& act);

// The seed's reorder [Co][Ci][Kh][Kw] → [Co][Kh][Kw][Ci], element for element.
std::vector<int8_t> reorder_ohwi(const std::vector<int8_t>& q, int64_t co, int64_t ci, int64_t kh, int64_t kw);
// int4 codes [Co][Ci][Kh][Kw] → the seed's packed bytes [Co][Kh][Kw][Ci / 2].
std::vector<uint8_t> pack_int4_ohwi(const std::vector<int8_t>& q, int64_t co, int64_t ci, int64_t kh, int64_t kw);
// The inverse, read the seed's way: bytes [Co][Kh][Kw][Ci / 2] → codes [Co][Kh][Kw][Ci].
std::vector<int8_t> unpack_int4_ohwi(const std::vector<uint8_t>& bytes, int64_t co, int64_t ci, int64_t kh, int64_t kw);

}  // namespace qjit::tuner
