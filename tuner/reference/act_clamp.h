// The clamp after the bias that w8a8_gemm and qconv2d share with wq_gemm:
// "none", "relu" [0, inf), "relu6" [0, 6]. Seed 002's kernels take any
// [minV, maxV] pair (max then min, in float); these three are the ones its
// host code builds from a model's activation.
#pragma once
#include <algorithm>
#include <string>

#include "codegen/error.h"

namespace qjit::tuner {

inline void check_act(const std::string& act) {
  if (act != "none" && act != "relu" && act != "relu6")
    throw Error("spec", "act=\"" + act + "\" (expected none, relu or relu6)");
}

inline double apply_act(double v, const std::string& act) {
  if (act == "relu" || act == "relu6") v = std::max(v, 0.0);
  if (act == "relu6") v = std::min(v, 6.0);
  return v;
}

}  // namespace qjit::tuner
