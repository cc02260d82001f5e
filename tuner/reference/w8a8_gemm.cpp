#include "tuner/reference/w8a8_gemm.h"

#include <cmath>

#include "codegen/error.h"
#include "tuner/reference/act_clamp.h"

namespace qjit::tuner {
namespace {

void check_pair(const BlockQuantized& a, const BlockQuantized& w, const std::vector<float>& bias,
                const std::string& act) {
  check_act(act);
  check_w8a8_block(a.k, a.block);
  if (w.k != a.k)
    throw Error("spec", "w8a8: weights have k=" + std::to_string(w.k) + ", activations k=" + std::to_string(a.k));
  if (w.block != a.block)
    throw Error("spec", "w8a8: weights have block=" + std::to_string(w.block) + ", activations block=" +
                            std::to_string(a.block) + " (both sides are quantized per the same blocks of K)");
  if (!bias.empty() && static_cast<int64_t>(bias.size()) != w.rows)
    throw Error("argument", "w8a8: bias has " + std::to_string(bias.size()) + " elements; n=" + std::to_string(w.rows));
}

}  // namespace

W8A8Result w8a8_gemm_reference(const BlockQuantized& a, const BlockQuantized& w, const std::vector<float>& bias,
                               const std::string& act) {
  check_pair(a, w, bias, act);
  const int64_t m = a.rows, n = w.rows, k = a.k, bs = a.block, nb = a.blocks();
  W8A8Result r;
  r.m = m, r.n = n;
  r.y.resize(m * n), r.magnitude.resize(m * n);
  for (int64_t row = 0; row < m; ++row)
    for (int64_t col = 0; col < n; ++col) {
      double acc = 0.0, mag = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* qa = a.q.data() + row * k + b * bs;
        const int8_t* qw = w.q.data() + col * k + b * bs;
        int64_t cq = 0;
        for (int64_t i = 0; i < bs; ++i) cq += int64_t{qa[i]} * qw[i];
        const double sa = a.scale[row * nb + b], oa = a.offset[row * nb + b];
        const double sw = w.scale[col * nb + b], ow = w.offset[col * nb + b];
        const double terms[4] = {sa * sw * static_cast<double>(cq), sa * ow * a.sum[row * nb + b],
                                 oa * sw * w.sum[col * nb + b], static_cast<double>(bs) * oa * ow};
        for (double t : terms) acc += t, mag += std::fabs(t);
      }
      if (!bias.empty()) acc += bias[col], mag += std::fabs(bias[col]);
      r.y[row * n + col] = apply_act(acc, act);
      r.magnitude[row * n + col] = mag;
    }
  return r;
}

double w8a8_tolerance(double magnitude, double y, int64_t blocks, const std::string& out_type) {
  double u_out, floor_out = 0.0;
  if (out_type == "fp32") {
    u_out = 0x1p-24;
  } else if (out_type == "fp16") {
    u_out = 0x1p-11, floor_out = 0x1p-25;
  } else if (out_type == "bf16") {
    u_out = 0x1p-8;
  } else {
    throw Error("argument", "w8a8: out_type \"" + out_type + "\" (expected fp32, fp16 or bf16)");
  }
  auto gamma = [&](double u) {
    const double nu = static_cast<double>(blocks + 6) * u;
    return nu / (1.0 - nu);
  };
  const double combine = (gamma(0x1p-24) + gamma(0x1p-53)) * magnitude;
  return combine + u_out * (std::fabs(y) + combine) + floor_out;  // the value rounded is within `combine` of y
}

}  // namespace qjit::tuner
