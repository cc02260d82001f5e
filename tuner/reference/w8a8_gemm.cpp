#include "tuner/reference/w8a8_gemm.h"

#include <algorithm>
#include <cmath>
#include <thread>

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
                               const std::string& act, const std::vector<int64_t>& rows) {
  check_pair(a, w, bias, act);
  std::vector<int64_t> rs = rows;
  if (rs.empty())
    for (int64_t i = 0; i < a.rows; ++i) rs.push_back(i);
  for (int64_t row : rs)
    if (row < 0 || row >= a.rows)
      throw Error("argument", "w8a8: row " + std::to_string(row) + " outside the activations' m=" +
                                  std::to_string(a.rows));
  const int64_t m = static_cast<int64_t>(rs.size()), n = w.rows, k = a.k, bs = a.block, nb = a.blocks();
  W8A8Result r;
  r.m = m, r.n = n;
  r.y.resize(m * n), r.magnitude.resize(m * n);
  auto cols = [&](int64_t begin, int64_t end) {
    for (int64_t col = begin; col < end; ++col)
      for (int64_t i = 0; i < m; ++i) {
        const int64_t row = rs[i];
        double acc = 0.0, mag = 0.0;
        for (int64_t b = 0; b < nb; ++b) {
          const int8_t* qa = a.q.data() + row * k + b * bs;
          const int8_t* qw = w.q.data() + col * k + b * bs;
          int64_t cq = 0;
          for (int64_t e = 0; e < bs; ++e) cq += int64_t{qa[e]} * qw[e];
          const double sa = a.scale[row * nb + b], oa = a.offset[row * nb + b];
          const double sw = w.scale[col * nb + b], ow = w.offset[col * nb + b];
          const double terms[4] = {sa * sw * static_cast<double>(cq), sa * ow * a.sum[row * nb + b],
                                   oa * sw * w.sum[col * nb + b], static_cast<double>(bs) * oa * ow};
          for (double t : terms) acc += t, mag += std::fabs(t);
        }
        if (!bias.empty()) acc += bias[col], mag += std::fabs(bias[col]);
        r.y[i * n + col] = apply_act(acc, act);
        r.magnitude[i * n + col] = mag;
      }
  };
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
  const int64_t per = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(cols, std::min(n, t * per), std::min(n, (t + 1) * per));
  for (auto& th : pool) th.join();
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
