#include "tuner/reference/w8a8_quant.h"

#include <cmath>
#include <limits>

#include "codegen/error.h"
#include "codegen/numeric.h"

namespace qjit::tuner {
namespace {

// Round half to even without depending on the floating-point environment's
// rounding mode. v − floor(v) is exact for every float.
float round_half_even(float v) {
  const float f = std::floor(v), d = v - f;
  if (d > 0.5f) return f + 1.0f;
  if (d < 0.5f) return f;
  return std::fmod(f, 2.0f) == 0.0f ? f : f + 1.0f;
}

// Saturate in float before converting: the conversion of an out-of-range float
// to int is undefined, the clamp then the conversion is what the seed's
// max(−128, min(127, (int)r)) gives for every r it can meet.
int8_t saturate(float r) { return static_cast<int8_t>(std::fmin(127.0f, std::fmax(-128.0f, r))); }

void check_finite(const float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(x[i]))
      throw Error("argument", "w8a8: element " + std::to_string(i) + " of a block is " + std::to_string(x[i]) +
                                  " (quantization needs finite values)");
}

BlockParams quantize_offset(const float* x, int64_t count, int8_t* q) {
  float lo = std::numeric_limits<float>::max(), hi = -std::numeric_limits<float>::max();
  for (int64_t i = 0; i < count; ++i) lo = std::fmin(lo, x[i]), hi = std::fmax(hi, x[i]);
  BlockParams p;
  const float spread = hi - lo;
  if (!std::isfinite(spread))
    throw Error("argument", "w8a8: block spread max − min = " + std::to_string(hi) + " − " + std::to_string(lo) +
                                " overflows float32");
  p.scale = spread / 255.0f;
  if (static_cast<double>(std::fabs(p.scale)) > 1e-5) {
    p.offset = std::fma(-p.scale, 127.0f, hi);  // one rounding: the seed's contracted FFMA
  } else {
    p.scale = 1.0f;
    p.offset = hi;
  }
  for (int64_t i = 0; i < count; ++i) {
    q[i] = saturate(std::round((x[i] - p.offset) / p.scale));  // std::round(float) is roundf
    p.sum += q[i];
  }
  return p;
}

BlockParams quantize_symmetric(const float* x, int64_t count, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < count; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  BlockParams p;
  p.scale = amax / 127.0f;
  if (p.scale == 0.0f) p.scale = 1.0f;
  for (int64_t i = 0; i < count; ++i) {
    q[i] = saturate(round_half_even(x[i] / p.scale));
    p.sum += q[i];
  }
  return p;
}

BlockQuantized quantize_rows(const std::vector<float>& x, int64_t rows, int64_t k, int64_t block, BlockRule rule,
                             const char* what) {
  if (rows <= 0) throw Error("argument", std::string("w8a8: ") + what + " rows=" + std::to_string(rows) + " (need ≥ 1)");
  check_w8a8_block(k, block);
  if (static_cast<int64_t>(x.size()) != rows * k)
    throw Error("argument", std::string("w8a8: ") + what + " has " + std::to_string(x.size()) + " elements; [" +
                                std::to_string(rows) + "][" + std::to_string(k) + "] needs " +
                                std::to_string(rows * k));
  BlockQuantized out;
  out.rows = rows, out.k = k, out.block = block, out.rule = rule;
  out.q.resize(rows * k);
  const int64_t nb = k / block;
  out.scale.resize(rows * nb), out.offset.resize(rows * nb), out.sum.resize(rows * nb);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = r * k + b * block;
      const BlockParams p = quantize_block(x.data() + at, block, rule, out.q.data() + at);
      out.scale[r * nb + b] = p.scale, out.offset[r * nb + b] = p.offset, out.sum[r * nb + b] = p.sum;
    }
  return out;
}

}  // namespace

BlockParams quantize_block(const float* x, int64_t count, BlockRule rule, int8_t* q) {
  check_finite(x, count);
  return rule == BlockRule::offset ? quantize_offset(x, count, q) : quantize_symmetric(x, count, q);
}

void check_w8a8_block(int64_t k, int64_t block) {
  if (k <= 0) throw Error("spec", "w8a8: k=" + std::to_string(k) + " (need ≥ 1)");
  if (block < 32 || block > 512)
    throw Error("spec", "w8a8: block=" + std::to_string(block) + " (expected 32..512)");
  if (k % block)
    throw Error("spec", "w8a8: block=" + std::to_string(block) + " does not divide k=" + std::to_string(k));
}

BlockQuantized quantize_activations(const std::vector<float>& x, int64_t m, int64_t k, int64_t block,
                                    BlockRule rule) {
  return quantize_rows(x, m, k, block, rule, "activations x [m][k]");
}

BlockQuantized pack_weights(const std::vector<float>& w, int64_t n, int64_t k, int64_t block, BlockRule rule) {
  return quantize_rows(w, n, k, block, rule, "weights W [n][k]");
}

BlockQuantized pack_weight_codes(std::vector<int8_t> q, std::vector<float> scale, std::vector<float> offset,
                                 int64_t n, int64_t k, int64_t block) {
  if (n <= 0) throw Error("argument", "w8a8: weights n=" + std::to_string(n) + " (need ≥ 1)");
  check_w8a8_block(k, block);
  const int64_t nb = k / block;
  auto expect = [](const char* what, size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want)
      throw Error("argument", std::string("w8a8: ") + what + " has " + std::to_string(got) + " elements; expected " +
                                  std::to_string(want));
  };
  expect("weight codes [n][k]", q.size(), n * k);
  expect("weight scales [n][k/block]", scale.size(), n * nb);
  const bool has_offset = !offset.empty();
  if (has_offset) expect("weight offsets [n][k/block]", offset.size(), n * nb);
  BlockQuantized out;
  out.rows = n, out.k = k, out.block = block;
  out.rule = has_offset ? BlockRule::offset : BlockRule::symmetric;
  out.q = std::move(q);
  out.scale = std::move(scale);
  out.offset = has_offset ? std::move(offset) : std::vector<float>(n * nb, 0.0f);
  out.sum.assign(n * nb, 0);
  for (int64_t i = 0; i < n * k; ++i) out.sum[(i / k) * nb + (i % k) / block] += out.q[i];
  return out;
}

std::vector<float> widen_to_float(const std::string& type, const void* data, size_t count) {
  if (type != "fp16" && type != "bf16" && type != "fp32")
    throw Error("argument", "w8a8: element type \"" + type + "\" (expected fp16, bf16 or fp32)");
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(element_to_double(type, data, i));
  return out;
}

}  // namespace qjit::tuner
