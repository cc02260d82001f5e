#include "tuner/reference/w8a8_fp8.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "codegen/error.h"
#include "tuner/reference/act_clamp.h"
#include "tuner/reference/w8a8_gemm.h"

namespace qjit::tuner {
namespace {

constexpr double kMax = 448.0;

// Round half to even of a non-negative double that is exactly a float's quotient by a power of two.
double round_half_even(double v) {
  const double f = std::floor(v), d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

void check_block(const char* what, int64_t size, int64_t block) {
  if (block < 1 || size % block)
    throw Error("spec", std::string("fp8: block ") + std::to_string(block) + " does not divide " + what + "=" +
                            std::to_string(size));
}

float block_scale(float amax) {
  const float s = amax / 448.0f;
  return s == 0.0f ? 1.0f : s;
}

}  // namespace

uint8_t e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= kMax) return sign | 0x7E;  // satfinite (448 itself is 0x7E)
  if (a < 0x1p-6) {
    // Subnormal steps of 2^-9; a quotient of 8 is the smallest normal, code 8 (e = 1, m = 0).
    return sign | static_cast<uint8_t>(round_half_even(a / 0x1p-9));
  }
  int e2 = 0;
  std::frexp(a, &e2);  // a = f·2^e2, f in [0.5, 1): the leading bit is 2^(e2 − 1)
  int e = e2 - 1;
  double q = round_half_even(a / std::ldexp(1.0, e - 3));  // 8 .. 16 eighths of 2^e
  if (q == 16) q = 8, ++e;
  // a < 448 keeps e ≤ 8 with q ≤ 14 (1.75·2^8), never the NaN pattern.
  return sign | static_cast<uint8_t>(((e + 7) << 3) | (static_cast<int>(q) - 8));
}

float e4m3_to_float(uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return static_cast<float>((code & 0x80) ? -v : v);
}

Fp8Rows quantize_fp8_rows(const std::vector<float>& x, int64_t rows, int64_t k, int64_t block) {
  check_block("k", k, block);
  if (rows < 1 || static_cast<int64_t>(x.size()) != rows * k)
    throw Error("argument", "fp8: x has " + std::to_string(x.size()) + " elements; [" + std::to_string(rows) + "][" +
                                std::to_string(k) + "] needs " + std::to_string(rows * k));
  Fp8Rows out;
  out.rows = rows, out.k = k, out.block = block;
  out.q.resize(x.size());
  out.scale.resize(rows * (k / block));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k / block; ++b) {
      float amax = 0.0f;
      for (int64_t i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(x[r * k + b * block + i]));
      const float s = block_scale(amax);
      out.scale[r * (k / block) + b] = s;
      for (int64_t i = 0; i < block; ++i) out.q[r * k + b * block + i] = e4m3_from_float(x[r * k + b * block + i] / s);
    }
  return out;
}

Fp8Tiles quantize_fp8_tiles(const std::vector<float>& w, int64_t n, int64_t k, int64_t block_n, int64_t block_k) {
  check_block("n", n, block_n);
  check_block("k", k, block_k);
  if (static_cast<int64_t>(w.size()) != n * k)
    throw Error("argument", "fp8: W has " + std::to_string(w.size()) + " elements; [" + std::to_string(n) + "][" +
                                std::to_string(k) + "] needs " + std::to_string(n * k));
  Fp8Tiles out;
  out.n = n, out.k = k, out.block_n = block_n, out.block_k = block_k;
  out.q.resize(w.size());
  const int64_t tn = n / block_n, tk = k / block_k;
  out.scale.resize(tn * tk);
  for (int64_t a = 0; a < tn; ++a)
    for (int64_t b = 0; b < tk; ++b) {
      float amax = 0.0f;
      for (int64_t r = a * block_n; r < (a + 1) * block_n; ++r)
        for (int64_t c = b * block_k; c < (b + 1) * block_k; ++c) amax = std::fmax(amax, std::fabs(w[r * k + c]));
      const float s = block_scale(amax);
      out.scale[a * tk + b] = s;
      for (int64_t r = a * block_n; r < (a + 1) * block_n; ++r)
        for (int64_t c = b * block_k; c < (b + 1) * block_k; ++c) out.q[r * k + c] = e4m3_from_float(w[r * k + c] / s);
    }
  return out;
}

double fp8_tensor_core_bound(const double* p, int64_t count) {
  double worst = 0;
  for (int64_t step : {32, 16}) {
    double t = 0, c = 0;
    for (int64_t s = 0; s < count; s += step) {
      double big = std::fabs(c);
      for (int64_t i = s; i < std::min(count, s + step); ++i) big = std::fmax(big, std::fabs(p[i])), c += p[i];
      t += static_cast<double>(step + 1) * big + std::fabs(c);
    }
    worst = std::fmax(worst, t);
  }
  return worst;
}

Fp8GemmResult fp8_gemm_check_reference(const Fp8Rows& a, const Fp8Tiles& w, const std::vector<float>& bias,
                                       const std::string& act, const std::vector<int64_t>& rows) {
  if (a.k != w.k || a.block != w.block_k)
    throw Error("spec", "fp8: x has k=" + std::to_string(a.k) + ", block " + std::to_string(a.block) + "; W k=" +
                            std::to_string(w.k) + ", block_k " + std::to_string(w.block_k));
  if (!bias.empty() && static_cast<int64_t>(bias.size()) != w.n)
    throw Error("argument", "fp8: bias has " + std::to_string(bias.size()) + " elements; expected n=" + std::to_string(w.n));
  check_act(act);
  std::vector<int64_t> which = rows;
  if (which.empty())
    for (int64_t r = 0; r < a.rows; ++r) which.push_back(r);
  for (int64_t r : which)
    if (r < 0 || r >= a.rows) throw Error("argument", "fp8: row " + std::to_string(r) + " out of range");
  const int64_t blocks = a.k / a.block, tk = w.k / w.block_k;
  Fp8GemmResult out;
  out.m = static_cast<int64_t>(which.size()), out.n = w.n;
  out.y.resize(which.size() * w.n), out.magnitude.resize(out.y.size()), out.tc_magnitude.resize(out.y.size());
  // Decoded once: the products below are exact in double (8 significant bits within 2^-18 .. 2^17), and so
  // is any sum of up to 512 of them (fewer than 53 bits).
  std::vector<double> wd(w.q.size()), xd(which.size() * a.k);
  for (size_t i = 0; i < w.q.size(); ++i) wd[i] = e4m3_to_float(w.q[i]);
  for (size_t i = 0; i < which.size(); ++i)
    for (int64_t k = 0; k < a.k; ++k) xd[i * a.k + k] = e4m3_to_float(a.q[which[i] * a.k + k]);
  auto cols = [&](int64_t begin, int64_t end) {
    std::vector<double> p(a.block);
    for (int64_t c = begin; c < end; ++c)
      for (size_t i = 0; i < which.size(); ++i) {
        double acc = bias.empty() ? 0.0 : bias[c], mag = std::fabs(acc), tc = 0;
        for (int64_t b = 0; b < blocks; ++b) {
          double dot = 0, abs_dot = 0;
          for (int64_t k = 0; k < a.block; ++k) {
            p[k] = xd[i * a.k + b * a.block + k] * wd[c * w.k + b * a.block + k];
            dot += p[k], abs_dot += std::fabs(p[k]);
          }
          const double s = static_cast<double>(a.scale[which[i] * blocks + b]) * w.scale[(c / w.block_n) * tk + b];
          acc += s * dot;
          mag += std::fabs(s) * abs_dot;
          tc += std::fabs(s) * fp8_tensor_core_bound(p.data(), a.block);
        }
        out.y[i * w.n + c] = apply_act(acc, act);
        out.magnitude[i * w.n + c] = mag;
        out.tc_magnitude[i * w.n + c] = tc;
      }
  };
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
  const int64_t per = (w.n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(cols, std::min(w.n, t * per), std::min(w.n, (t + 1) * per));
  for (auto& th : pool) th.join();
  return out;
}

std::vector<double> fp8_gemm_reference(const Fp8Rows& a, const Fp8Tiles& w, const std::vector<float>& bias,
                                       const std::string& act, const std::vector<int64_t>& rows) {
  return fp8_gemm_check_reference(a, w, bias, act, rows).y;
}

double w8a8_fp8_tolerance(double magnitude, double tc_magnitude, double y, int64_t blocks,
                          const std::string& out_type) {
  const double in_blocks = kFp8AccumulatorUnit * tc_magnitude;
  return in_blocks * (1 + 0x1p-7) + w8a8_tolerance(magnitude + in_blocks, y, blocks, out_type);
}

}  // namespace qjit::tuner
