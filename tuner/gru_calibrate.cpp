#include "tuner/gru_calibrate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "codegen/error.h"

namespace qjit::tuner {

using codegen::gru::GruParams;
using codegen::gru::QTensor;

namespace {

// Round half to even without the FPU's rounding mode (DESIGN.md: float → int
// quantization rounds half to even).
double round_half_even(double y) {
  double r = std::floor(y + 0.5);
  if (r - y == 0.5 && std::fmod(r, 2.0) != 0.0) r -= 1.0;
  return r;
}

void add_values(EmaRange& r, const double* v, size_t n, const double* more = nullptr, size_t more_n = 0) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (size_t i = 0; i < n; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
  for (size_t i = 0; i < more_n; ++i) lo = std::min(lo, more[i]), hi = std::max(hi, more[i]);
  if (lo <= hi) r.add_step(lo, hi);
}

// The float weights with their gate rows in the seed's order (u, r, n).
struct SeedOrder {
  std::vector<double> W, R, bw, br;
  explicit SeedOrder(const GruFloatWeights& w)
      : W(torch_to_seed_gates(w.weight_ih, w.hidden_size, w.input_size)),
        R(torch_to_seed_gates(w.weight_hh, w.hidden_size, w.hidden_size)),
        bw(torch_to_seed_gates(w.bias_ih, w.hidden_size, 1)),
        br(torch_to_seed_gates(w.bias_hh, w.hidden_size, 1)) {}
};

// The most each scale may be: lowered, one step at a time, by the int32 rule.
struct Caps {
  std::map<std::string, int> tensor;  // by the document's tensor names
  std::vector<int> W, R;              // per channel
};

// Per channel: the shift of a row of a weight matrix, and its codes.
struct QuantRows {
  std::vector<int> shift;
  std::vector<int32_t> q;
};
QuantRows quantize_rows(const std::vector<double>& m, int64_t cols, int bits, const std::vector<int>& caps) {
  QuantRows out;
  const int64_t rows = static_cast<int64_t>(caps.size());
  const QTensor code{bits, true, 0, 0};
  for (int64_t c = 0; c < rows; ++c) {
    double max_abs = 0;
    for (int64_t k = 0; k < cols; ++k) max_abs = std::max(max_abs, std::fabs(m[c * cols + k]));
    QTensor t = code;
    t.shift = std::min(choose_symmetric_shift(max_abs, bits), caps[c]);
    out.shift.push_back(t.shift);
    for (int64_t k = 0; k < cols; ++k) out.q.push_back(quantize(m[c * cols + k], t));
  }
  return out;
}

// Biases at the scale of their GEMM sum (gemm_shift[c]): exact in step B.
// Their bit width is the fewest that hold every code, at most 31 (so that a
// bias moved into the GEMM's scale stays within int32); a channel that would
// need more is put at a coarser scale.
struct QuantBias {
  int bits = 2;
  std::vector<int> shift;
  std::vector<int32_t> q;
};
QuantBias quantize_bias(const std::vector<double>& b, const std::vector<int>& gemm_shift) {
  constexpr int kMaxBits = 31;
  const double limit = std::ldexp(1.0, kMaxBits - 1) - 1;
  QuantBias out;
  for (size_t c = 0; c < b.size(); ++c) {
    int s = std::min(gemm_shift[c], 32);
    while (s > -32 && std::fabs(round_half_even(std::ldexp(b[c], s))) > limit) --s;
    const int32_t q = quantize(b[c], QTensor{kMaxBits, true, s, 0});
    out.shift.push_back(s);
    out.q.push_back(q);
    // Bits of a signed code: q in [-2^(bits-1), 2^(bits-1) - 1].
    int bits = 2;
    while (q < -(int64_t{1} << (bits - 1)) || q > (int64_t{1} << (bits - 1)) - 1) ++bits;
    out.bits = std::max(out.bits, bits);
  }
  return out;
}

nlohmann::json tensor_json(const QTensor& t) {
  return {{"bits", t.bits}, {"signed", t.is_signed}, {"shift", t.shift}, {"zp", t.zp}};
}

struct Built {
  nlohmann::json doc;  // without LUTs: GruParams fits them
  GruWeights weights;
};

Built build(const GruFloatWeights& fw, const SeedOrder& w, const GruRanges& r, const GruQuantConfig& cfg,
            const Caps& caps) {
  const int bits = cfg.activation_bits;
  auto cap = [&](const std::string& name) {
    auto it = caps.tensor.find(name);
    return it == caps.tensor.end() ? 32 : it->second;
  };
  std::map<std::string, QTensor> t;
  for (const auto& [name, range] : r.named()) {
    const bool sigmoid = name == "u_out" || name == "r_out";
    if (name == "n_out") {  // tanh's output: symmetric (the seed's table A)
      const int shift = std::min(choose_symmetric_shift(std::max(std::fabs(range->min), std::fabs(range->max)), bits), cap(name));
      t[name] = QTensor{bits, true, shift, 0};
    } else {
      t[name] = choose_asymmetric(range->min, range->max, bits, !(sigmoid && cfg.sigmoid_unsigned), cfg.zero_point,
                                  cap(name));
    }
  }
  const int64_t C = fw.input_size, H = fw.hidden_size;
  const QuantRows W = quantize_rows(w.W, C, cfg.weight_bits, caps.W);
  const QuantRows R = quantize_rows(w.R, H, cfg.weight_bits, caps.R);
  std::vector<int> gx(static_cast<size_t>(3 * H)), gh(static_cast<size_t>(3 * H));
  for (size_t c = 0; c < gx.size(); ++c) gx[c] = W.shift[c] + t["x"].shift, gh[c] = R.shift[c] + t["h"].shift;
  const QuantBias bw = quantize_bias(w.bw, gx), br = quantize_bias(w.br, gh);

  Built b;
  nlohmann::json tensors;
  for (const auto& [name, q] : t) tensors[name] = tensor_json(q);
  b.doc = {{"input_size", C},
           {"hidden_size", H},
           {"lut_segments", cfg.lut_segments},
           {"tensors", tensors},
           {"weights",
            {{"W", {{"bits", cfg.weight_bits}, {"shift", W.shift}}},
             {"R", {{"bits", cfg.weight_bits}, {"shift", R.shift}}},
             {"bw", {{"bits", bw.bits}, {"shift", bw.shift}}},
             {"br", {{"bits", br.bits}, {"shift", br.shift}}}}}};
  b.weights = {W.q, R.q, bw.q, br.q};
  return b;
}

// Which scale to make coarser when validate() refuses a document: the one
// whose lowering shrinks the bound the failed rule names (GruParams::validate
// words its rules so). Returns false when the message names no such rule.
struct Coarsen {
  std::string tensor;  // a document tensor, or "W" / "R" with a channel
  int64_t channel = -1;
};
bool what_to_coarsen(const std::string& message, Coarsen& out) {
  static const std::pair<const char*, const char*> kRules[] = {
      {"bw in the GEMM's scale", "W"},  // the bias sits at the GEMM's scale: a coarser W row lowers it
      {"br in the GEMM's scale", "R"},
      {"rescaled to ih", "ih"},         // the GEMM sum in ih's scale
      {"rescaled to hh", "hh"},
      {"the gate input u_in", "u_in"},  // ih and hh in the gate input's scale
      {"the gate input r_in", "r_in"},
      {"the gate input n_in", "n_in"},
      {"n_out aligned to h", "h"},      // n in h's scale
      {"the new h before saturation", "h"}};
  for (const auto& [phrase, tensor] : kRules) {
    if (message.find(phrase) == std::string::npos) continue;
    out.tensor = tensor;
    if (out.tensor == "W" || out.tensor == "R") {
      const size_t at = message.find("(channel ");
      if (at == std::string::npos) return false;
      out.channel = std::stoll(message.substr(at + 9));
    }
    return true;
  }
  return false;
}

}  // namespace

void EmaRange::add_step(double step_min, double step_max) {
  if (steps++ == 0) {
    min = step_min, max = step_max;
  } else {
    min = 0.9 * min + 0.1 * step_min;
    max = 0.9 * max + 0.1 * step_max;
  }
}

std::vector<std::pair<std::string, const EmaRange*>> GruRanges::named() const {
  return {{"x", &x},        {"h", &h},         {"ih", &ih},   {"hh", &hh},       {"u_in", &u_in},
          {"u_out", &u_out}, {"r_in", &r_in}, {"r_out", &r_out}, {"n_in", &n_in}, {"n_out", &n_out}};
}

GruRanges track_ranges(const GruFloatWeights& w, const std::vector<double>& x, const std::vector<double>& h0,
                       int64_t T, int64_t N, const std::function<void(int64_t, int64_t)>& progress) {
  GruRanges r;
  const size_t C = static_cast<size_t>(w.input_size), H = static_cast<size_t>(w.hidden_size), n = static_cast<size_t>(N);
  gru_float_forward(w, x, h0, T, N, [&](const GruFloatStep& s) {
    add_values(r.x, s.x, n * C);
    // h0 counts towards the first step's range of h.
    add_values(r.h, s.h.data(), s.h.size(), s.h_prev, s.t == 0 ? n * H : 0);
    add_values(r.ih, s.ih.data(), s.ih.size());
    add_values(r.hh, s.hh.data(), s.hh.size());
    const std::pair<EmaRange*, const std::vector<double>*> gates[] = {{&r.u_in, &s.u_in}, {&r.u_out, &s.u_out},
                                                                      {&r.r_in, &s.r_in}, {&r.r_out, &s.r_out},
                                                                      {&r.n_in, &s.n_in}, {&r.n_out, &s.n_out}};
    for (const auto& [range, v] : gates) add_values(*range, v->data(), v->size());
    if (progress) progress(s.t + 1, T);
  });
  return r;
}

GruCalibration quantize_gru(const GruFloatWeights& w, const GruRanges& ranges, const GruQuantConfig& cfg) {
  w.check();
  if (cfg.activation_bits < 2 || cfg.activation_bits > 16)
    throw Error("argument", "activation bits = " + std::to_string(cfg.activation_bits) + " is outside 2..16");
  if (cfg.weight_bits < 2 || cfg.weight_bits > 8)
    throw Error("argument", "weight bits = " + std::to_string(cfg.weight_bits) + " is outside 2..8");
  if (cfg.lut_segments < 8 || cfg.lut_segments > 64)
    throw Error("argument", "LUT segments = " + std::to_string(cfg.lut_segments) + " is outside 8..64");
  const SeedOrder seed(w);
  Caps caps;
  caps.W.assign(static_cast<size_t>(3 * w.hidden_size), 32);
  caps.R = caps.W;
  GruCalibration out;
  // Each round lowers one scale by one step; shifts live in -32..32.
  for (int round = 0; round < 1000; ++round) {
    Built b = build(w, seed, ranges, cfg, caps);
    std::string message;
    try {
      out.params = GruParams::from_json(b.doc).to_json();
      out.weights = std::move(b.weights);
      return out;
    } catch (const Error& e) {
      message = e.what();
    }
    Coarsen c;
    if (!what_to_coarsen(message, c)) throw Error("gru", "calibration: " + message);
    int* cap = nullptr;
    int shift = 0;
    if (c.channel >= 0) {
      cap = &(c.tensor == "W" ? caps.W : caps.R)[static_cast<size_t>(c.channel)];
      shift = b.doc["weights"][c.tensor]["shift"][static_cast<size_t>(c.channel)].get<int>();
    } else {
      cap = &caps.tensor.emplace(c.tensor, 32).first->second;
      shift = b.doc["tensors"][c.tensor]["shift"].get<int>();
    }
    if (shift <= -32) throw Error("gru", "calibration: no scale of " + c.tensor + " satisfies: " + message);
    *cap = shift - 1;
    out.adjustments.push_back(c.tensor + (c.channel >= 0 ? "[" + std::to_string(c.channel) + "]" : "") + " shift " +
                              std::to_string(shift) + " -> " + std::to_string(shift - 1) + " (" + message + ")");
  }
  throw Error("gru", "calibration: the int32 rule still fails after 1000 adjustments");
}

GruCalibration calibrate(const GruFloatWeights& w, const std::vector<double>& x, const std::vector<double>& h0,
                         int64_t T, int64_t N, const GruQuantConfig& cfg,
                         const std::function<void(int64_t, int64_t)>& progress) {
  return quantize_gru(w, track_ranges(w, x, h0, T, N, progress), cfg);
}

QTensor choose_asymmetric(double min, double max, int bits, bool is_signed, ZeroPoint placement, int max_shift) {
  QTensor t{bits, is_signed, 0, 0};
  min = std::min(min, 0.0), max = std::max(max, 0.0);
  if (!(max - min > 0)) max = 1.0;  // never observed away from zero
  const double steps = static_cast<double>(t.hi() - t.lo());
  const int shift = static_cast<int>(std::floor(std::log2(steps / (max - min))));
  t.shift = std::clamp(shift, -32, std::min(32, max_shift));
  // The value of the lowest code: min (the seed), or min less half the slack.
  double low = min;
  if (placement == ZeroPoint::centred && min < 0 && max > 0) low = (min + max - std::ldexp(steps, -t.shift)) / 2;
  t.zp = t.saturate(t.lo() + static_cast<int64_t>(round_half_even(std::ldexp(-low, t.shift))));
  return t;
}

int choose_symmetric_shift(double max_abs, int bits) {
  if (!(max_abs > 0)) max_abs = 1.0;
  const double top = std::ldexp(1.0, bits - 1) - 1;
  int shift = std::clamp(static_cast<int>(std::floor(std::log2(top / max_abs))), -32, 32);
  // log2 near a power of two may land one off either way: settle it on the codes themselves.
  while (shift < 32 && round_half_even(std::ldexp(max_abs, shift + 1)) <= top) ++shift;
  while (shift > -32 && round_half_even(std::ldexp(max_abs, shift)) > top) --shift;
  return shift;
}

int32_t quantize(double v, const QTensor& t) {
  if (std::isnan(v)) throw Error("argument", "cannot quantize NaN");
  // Clamp before converting: a value far outside the range saturates, never overflows the conversion.
  const double y = std::clamp(round_half_even(std::ldexp(v, t.shift)), -std::ldexp(1.0, 40), std::ldexp(1.0, 40));
  return static_cast<int32_t>(t.saturate(static_cast<int64_t>(y) + t.zp));
}

std::vector<int32_t> quantize(const std::vector<double>& v, const QTensor& t) {
  std::vector<int32_t> q(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) throw Error("argument", "cannot quantize NaN (element " + std::to_string(i) + ")");
    q[i] = quantize(v[i], t);
  }
  return q;
}

double dequantize(int64_t q, const QTensor& t) { return std::ldexp(static_cast<double>(q - t.zp), -t.shift); }

std::vector<double> dequantize(const std::vector<int32_t>& q, const QTensor& t) {
  std::vector<double> v(q.size());
  for (size_t i = 0; i < q.size(); ++i) v[i] = dequantize(q[i], t);
  return v;
}

Accuracy compare(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size())
    throw Error("argument", "compare: " + std::to_string(got.size()) + " values against " + std::to_string(want.size()));
  Accuracy a;
  if (got.empty()) return a;
  double se = 0, ae = 0, dot = 0, gg = 0, ww = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = got[i] - want[i];
    se += d * d, ae += std::fabs(d), a.max_abs = std::max(a.max_abs, std::fabs(d));
    dot += got[i] * want[i], gg += got[i] * got[i], ww += want[i] * want[i];
  }
  const double n = static_cast<double>(got.size());
  a.mse = se / n, a.mae = ae / n;
  a.cosine = gg > 0 && ww > 0 ? dot / std::sqrt(gg * ww) : (gg == ww ? 1.0 : 0.0);
  return a;
}

}  // namespace qjit::tuner
