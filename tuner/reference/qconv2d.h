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

#include "codegen/ops/qconv2d.h"

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
// k < 1, or an empty output. (Defined with the op, whose spec checks use it.)
using codegen::conv_out_size;

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
// [Co] or empty; act "none", "relu", "relu6". Result in s.layout. With
// `magnitude`, also each output's Σ |x|·(|q·s| + |o|) + |bias| (same layout):
// the scale of the rounding errors of a GPU result (qconv2d_tolerance).
std::vector<double> qconv2d_reference(const Conv2dShape& s, const std::vector<float>& x, const QConvWeights& w,
                                      const std::vector<float>& bias, const std::string& act,
                                      std::vector<double>* magnitude = nullptr);

// The largest |gpu − reference| allowed for one output of a qconv2d kernel
// with `k` = Kh·Kw·Ci products and x (and y) of type x_type ("fp16", "fp32").
//
// Why: x and the weights' codes, scales and offsets are exact inputs; the
// errors are roundings. Each weight w = q·s + o is formed in fp32 (at most
// two roundings, of a value within |q·s| + |o|); with fp16 x the tensor-core
// kernel rounds it once more to fp16 (u = 2^-11; the direct kernel does not,
// and is within the same bound). A product x·w is exact in fp32 when both
// are fp16 (the mma's case) and one rounding otherwise. The k products and
// the bias are summed in fp32 in any order: at most k + 1 roundings on a
// path. Each rounding is taken as 2^-23 (one fp32 ulp, not half of one:
// the tensor cores' accumulation truncates, M. Fasi et al., "Numerical
// behavior of NVIDIA tensor cores", PeerJ CS 2021). With n = k + 4 and
// γ_n = n·u / (1 − n·u) (Higham, "Accuracy and Stability of Numerical
// Algorithms", §3.1) the fp32 result is within
//   (γ_n(2^-23) + [fp16 x] 2^-11·(1 + γ_2)) · magnitude
// of the exact one. The clamp moves no two values further apart. Writing y
// adds u_out·|y| (2^-24 fp32, 2^-11 fp16) and, for fp16, half the smallest
// subnormal step (2^-25). The reference's own float64 error is added with
// γ_n(2^-53).
double qconv2d_tolerance(double magnitude, double y, int64_t k, const std::string& x_type);

// The seed's reorder [Co][Ci][Kh][Kw] → [Co][Kh][Kw][Ci], element for element.
std::vector<int8_t> reorder_ohwi(const std::vector<int8_t>& q, int64_t co, int64_t ci, int64_t kh, int64_t kw);
// int4 codes [Co][Ci][Kh][Kw] → the seed's packed bytes [Co][Kh][Kw][Ci / 2].
std::vector<uint8_t> pack_int4_ohwi(const std::vector<int8_t>& q, int64_t co, int64_t ci, int64_t kh, int64_t kw);
// The runtime's weights from the model's codes [Co][Ci][Kh][Kw]: the seed's
// packed OHWI bytes, int8 [Co][Kh][Kw][Ci] (each code's two's complement
// byte) or int4 [Co][Kh][Kw][Ci / 2] (pack_int4_ohwi). Throws for a code
// outside the bit range.
std::vector<uint8_t> pack_qconv2d_weights(const std::vector<int8_t>& q, int bits, int64_t co, int64_t ci, int64_t kh,
                                          int64_t kw);
// The inverse: packed bytes → codes [Co][Ci][Kh][Kw].
std::vector<int8_t> unpack_qconv2d_weights(const std::vector<uint8_t>& bytes, int bits, int64_t co, int64_t ci,
                                           int64_t kh, int64_t kw);
// The inverse, read the seed's way: bytes [Co][Kh][Kw][Ci / 2] → codes [Co][Kh][Kw][Ci].
std::vector<int8_t> unpack_int4_ohwi(const std::vector<uint8_t>& bytes, int64_t co, int64_t ci, int64_t kh, int64_t kw);

}  // namespace qjit::tuner
