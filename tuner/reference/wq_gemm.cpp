#include "tuner/reference/wq_gemm.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include "codegen/error.h"
#include "codegen/numeric.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {

// Where value (R, half) of a lane lives among the lane's words: word index,
// bit offset, width. b = 3 gives two places (2-bit plane, 1-bit plane).
struct Place {
  int word, bit, width;
};

// The rule for b ∈ {1, 2, 4, 8}: P = 16/b registers per word, field i = lo of
// register P·w + i, field i + P = its hi.
Place place_pow2(int b, int reg, int half, int first_word) {
  const int per_word = 16 / b;
  return {first_word + reg / per_word, b * (reg % per_word + half * per_word), b};
}

void places(int bits, int reg, int half, Place* out, int* count) {
  if (bits == 3) {
    out[0] = place_pow2(2, reg, half, 0);  // bits 0..1: words 0, 1
    out[1] = place_pow2(1, reg, half, 2);  // bit 2: word 2
    *count = 2;
  } else {
    out[0] = place_pow2(bits, reg, half, 0);
    *count = 1;
  }
}

// Word j of lane `lane` in tile `tile` (see the header): the lane's vectors
// sit at slot lane ^ ((lane / 8) % 4) of each 32-vector block.
int64_t word_index(int bits, int64_t tile, int lane, int j) {
  const int v = native_vector_words(bits), slot = lane ^ ((lane >> 3) & 3);
  return tile * 32 * bits + (static_cast<int64_t>(j / v) * 32 + slot) * v + j % v;
}

// (n, k) of value (R, half) of lane l in tile (nt, kc).
void coords(int64_t nt, int64_t kc, int lane, int reg, int half, int64_t* n, int64_t* k) {
  const int gq = lane / 4, t = lane % 4, s = reg / 4, r = reg % 4;
  *n = 16 * nt + gq + 8 * (r % 2);
  *k = 64 * kc + 16 * t + 2 * s + 8 * (r / 2) + half;
}

template <typename Visit>
void for_each_value(int64_t k, int64_t n, int bits, Visit&& visit) {
  for (int64_t nt = 0; nt < n / 16; ++nt)
    for (int64_t kc = 0; kc < k / 64; ++kc)
      for (int lane = 0; lane < 32; ++lane)
        for (int reg = 0; reg < 16; ++reg)
          for (int half = 0; half < 2; ++half) {
            int64_t row, col;
            coords(nt, kc, lane, reg, half, &row, &col);
            Place pl[2];
            int count;
            places(bits, reg, half, pl, &count);
            const int64_t tile = nt * (k / 64) + kc;
            int shift = 0;  // value bits consumed by earlier places
            for (int i = 0; i < count; ++i) {
              visit(word_index(bits, tile, lane, pl[i].word), pl[i].bit, pl[i].width, shift, col * n + row);
              shift += pl[i].width;
            }
          }
}

void check_native_shape(int64_t k, int64_t n, int bits) {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    throw Error("argument", "native layout: bits=" + std::to_string(bits) + " (expected 2, 3, 4 or 8)");
  if (n % 16 || k % 64)
    throw Error("argument", "native layout: n=" + std::to_string(n) + " must be a multiple of 16 and k=" +
                                std::to_string(k) + " a multiple of 64");
}

}  // namespace

int native_vector_words(int bits) { return bits % 4 == 0 ? 4 : bits == 2 ? 2 : 1; }

std::vector<uint32_t> pack_native(const PlainQuant& p) {
  check_native_shape(p.k, p.n, p.bits);
  std::vector<uint32_t> out(p.k * p.n * p.bits / 32, 0);
  for_each_value(p.k, p.n, p.bits, [&](int64_t word, int bit, int width, int shift, int64_t kn) {
    out[word] |= ((static_cast<uint32_t>(p.q[kn]) >> shift) & ((1u << width) - 1)) << bit;
  });
  return out;
}

std::vector<uint8_t> unpack_native(const std::vector<uint32_t>& w, int64_t k, int64_t n, int bits) {
  check_native_shape(k, n, bits);
  if (static_cast<int64_t>(w.size()) != k * n * bits / 32)
    throw Error("argument", "native qweight has " + std::to_string(w.size()) + " words; k=" + std::to_string(k) +
                                " n=" + std::to_string(n) + " bits=" + std::to_string(bits) + " need " +
                                std::to_string(k * n * bits / 32));
  std::vector<uint8_t> q(k * n, 0);
  for_each_value(k, n, bits, [&](int64_t word, int bit, int width, int shift, int64_t kn) {
    q[kn] |= static_cast<uint8_t>(((w[word] >> bit) & ((1u << width) - 1)) << shift);
  });
  return q;
}

namespace {
void expect_words(const char* what, size_t got, int64_t want) {
  if (static_cast<int64_t>(got) != want)
    throw Error("argument", std::string(what) + " has " + std::to_string(got) + " int32 words; expected " +
                                std::to_string(want));
}
}  // namespace

PlainQuant unpack_awq(const std::vector<uint32_t>& qweight, const std::vector<uint32_t>& qzeros, int64_t k, int64_t n,
                      int64_t g) {
  expect_words("awq qweight [K, N/8]", qweight.size(), k * (n / 8));
  expect_words("awq qzeros [K/g, N/8]", qzeros.size(), (k / g) * (n / 8));
  PlainQuant p;
  p.k = k, p.n = n, p.g = g, p.bits = 4;
  p.q = unpack_awq_qweight(qweight, k, n);
  p.z = unpack_along_n(qzeros, k / g, n, true);
  return p;
}

PlainQuant unpack_gptq(const std::vector<uint32_t>& qweight, const std::vector<uint32_t>& qzeros, int64_t k, int64_t n,
                       int64_t g, bool symmetric) {
  expect_words("gptq qweight [K/8, N]", qweight.size(), (k / 8) * n);
  PlainQuant p;
  p.k = k, p.n = n, p.g = g, p.bits = 4;
  p.q = unpack_gptq_qweight(qweight, k, n);
  if (symmetric) {
    p.z.assign((k / g) * n, 8);
  } else {
    expect_words("gptq qzeros [K/g, N/8]", qzeros.size(), (k / g) * (n / 8));
    p.z = unpack_along_n(qzeros, k / g, n, false);
  }
  return p;
}

double dequant_exact(const PlainQuant& p, const std::string& zero, const std::string& scales_type, int64_t k,
                     int64_t n) {
  const int64_t grp = (k / p.g) * p.n + n;
  auto widen = [&](uint16_t v) -> double { return scales_type == "bf16" ? bf16_to_float(v) : half_to_float(v); };
  const int mid = 1 << (p.bits - 1);
  const int q = p.q[k * p.n + n];
  if (zero == "int") return (q - p.z[grp]) * widen(p.s[grp]);
  if (zero == "float") return (q - mid) * widen(p.s[grp]) + widen(p.o[grp]);
  return (q - mid) * widen(p.s[grp]);
}

std::vector<uint16_t> dequant_dense_nk(const PlainQuant& p, const std::string& zero, const std::string& scales_type) {
  std::vector<uint16_t> w(p.n * p.k);
  const bool bf16 = scales_type == "bf16";
  for (int64_t c = 0; c < p.n; ++c)
    for (int64_t k = 0; k < p.k; ++k) {
      const float v = static_cast<float>(dequant_exact(p, zero, scales_type, k, c));
      w[c * p.k + k] = bf16 ? float_to_bf16(v) : float_to_half(v);
    }
  return w;
}

PlainQuant random_quant(int64_t k, int64_t n, int64_t g, int bits, const std::string& scales_type, uint64_t seed) {
  SplitMix64 rng{seed};
  PlainQuant p;
  p.k = k, p.n = n, p.g = g, p.bits = bits;
  const int levels = 1 << bits;
  const int64_t groups = (k / g) * n;
  p.q.resize(k * n);
  for (auto& v : p.q) v = static_cast<uint8_t>(rng.next() % levels);
  // Zero points up to 2^b inclusive where a byte holds it: GPTQ v1 checkpoints
  // (stored zero - 1) give 4-bit zeros of 1..16.
  const int zero_levels = bits < 8 ? levels + 1 : levels;
  p.z.resize(groups);
  for (auto& v : p.z) v = static_cast<uint8_t>(rng.next() % zero_levels);
  const float smax = 2.0f / std::sqrt(static_cast<float>(k)) / static_cast<float>(levels / 2);
  auto to16 = [&](float f) { return scales_type == "bf16" ? float_to_bf16(f) : float_to_half(f); };
  p.s.resize(groups);
  for (auto& v : p.s) v = to16(smax * (0.5f + 0.5f * std::fabs(rng.uniform())));
  p.o.resize(groups);
  for (auto& v : p.o) v = to16(0.25f * smax * rng.uniform());
  return p;
}

std::vector<uint8_t> zeros_tensor(const PlainQuant& p, const std::string& zero) {
  std::vector<uint8_t> out;
  if (zero == "int") out.assign(p.z.begin(), p.z.end());
  if (zero == "float") {
    out.resize(p.o.size() * 2);
    std::memcpy(out.data(), p.o.data(), out.size());
  }
  return out;
}

std::vector<double> wq_gemm_reference(const codegen::OpSpec& spec, const std::vector<int64_t>& rows, const uint8_t* x,
                                      const PlainQuant& p, const uint8_t* bias) {
  const std::string xt = spec.get_str("x"), st = spec.get_str("scales"), zero = spec.get_str("zero"),
                    act = spec.get_str("act");
  const int64_t k = p.k, n = p.n;
  auto read = [&](const uint8_t* base, int64_t i) { return element_to_double(xt, base, static_cast<size_t>(i)); };
  std::vector<double> xd(rows.size() * k);
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t i = 0; i < k; ++i) xd[r * k + i] = read(x, rows[r] * k + i);
  std::vector<double> y(rows.size() * n);
  auto cols = [&](int64_t begin, int64_t end) {
    std::vector<double> w(k);
    for (int64_t c = begin; c < end; ++c) {
      for (int64_t i = 0; i < k; ++i) w[i] = dequant_exact(p, zero, st, i, c);  // k·(string compares) ≪ rows·k MACs
      for (size_t r = 0; r < rows.size(); ++r) {
        double acc = bias ? read(bias, c) : 0.0;
        for (int64_t i = 0; i < k; ++i) acc += xd[r * k + i] * w[i];
        if (act == "relu" || act == "relu6") acc = std::max(acc, 0.0);
        if (act == "relu6") acc = std::min(acc, 6.0);
        y[r * n + c] = acc;
      }
    }
  };
  const int threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 32));
  std::vector<std::thread> pool;
  const int64_t per = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) pool.emplace_back(cols, std::min(n, t * per), std::min(n, (t + 1) * per));
  for (auto& th : pool) th.join();
  return y;
}

}  // namespace qjit::tuner
