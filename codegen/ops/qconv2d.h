// qconv2d: conv2d of fp16/fp32 activations with int4/int8 weights quantized
// per block of input channels, w = q·s + o (../shared/seeds/002_*, the seed's
// CONV_FpAInt4B). Host side of templates/qconv2d/*.cu; the semantics and the
// seed's layouts are described next to the CPU reference in
// tuner/reference/qconv2d.h, the kernels in docs/qconv2d.md.
//
// Spec keys: n ci h w (input), co kh kw (weights), stride_h stride_w pad_h
// pad_w dil_h dil_w (each axis given on its own), layout nchw|nhwc (x and y),
// bits 4|8, block (input channels per (scale, offset); block = ci is per
// channel), x fp16|fp32 (x and y), bias no|yes, act none|relu|relu6.
//
// The call's tensors (QConv2dArgs in qjit/qjit.h):
//   x        [n][ci][h][w] (nchw) or [n][h][w][ci] (nhwc), type x
//   qweight  the seed's packed OHWI bytes: int8 [co][kh][kw][ci];
//            int4 [co][kh][kw][ci/2], channel 2j in the high nibble, each
//            nibble the code + 8 (tuner/reference/qconv2d.h pack_qconv2d_weights)
//   scales, offsets  float32 [co][ci/block]
//   bias     float32 [co] (with bias=yes; else null)
//   y        [n][co][oh][ow] or [n][oh][ow][co], x's layout and type
//
// Families (config key "family"):
//   direct         one thread per output point, no tiling, no tensor cores:
//                  the seed's structure, any spec, the obviously-correct baseline.
//   implicit_gemm  mma.sync m16n8k16 fp16 × fp16 → fp32 on the GEMM
//                  M = n·oh·ow, N = co, K = kh·kw·ci (K ordered fy, fx, ci as
//                  the packed weights are); x fp16 and ci a multiple of bk only.
//   igemm_ring     the same GEMM through a cp.async ring of shared-memory
//                  slots, split-k, nchw x through a transpose step; keys
//                  predeq (weights dequantised once per call by a step
//                  before) and wgmma (the multiply on sm_90a's wgmma).
#pragma once
#include <cstdint>
#include "codegen/op.h"

namespace qjit::codegen {

// (in + 2·pad − dil·(k − 1) − 1) / stride + 1, rounded down (PyTorch's and
// cuDNN's rule). Throws qjit::Error("spec", ...) naming the value and `axis`
// ("h" or "w") for stride < 1, pad < 0, dil < 1, k < 1, in < 1, or an empty output.
int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, const char* axis);

class QConv2dOp final : public OpDef {
 public:
  std::string name() const override { return "qconv2d"; }
  std::string summary() const override {
    return "conv2d, fp16/fp32 x, int4/int8 weights w = q*s + o per block of input channels";
  }
  std::vector<ParamDef> params() const override;
  void validate(const nlohmann::json& params) const override;
  std::string template_path(const nlohmann::json& config) const override;
  bool needs_sm90a(const nlohmann::json& config) const override;
  std::vector<ArgDef> args() const override;
  std::vector<nlohmann::json> candidates(const OpSpec& spec, const DeviceLimits& device) const override;
  nlohmann::json default_config(const OpSpec& spec) const override;
  void validate_config(const OpSpec& spec, const nlohmann::json& config) const override;
  std::vector<Constant> constants(const OpSpec& spec, const nlohmann::json& config) const override;
  Plan plan(const OpSpec& spec, const nlohmann::json& config) const override;
  Traffic traffic(const OpSpec& spec) const override;
};

}  // namespace qjit::codegen
