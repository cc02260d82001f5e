#include "codegen/ops/gru_params.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen::gru {
namespace {

constexpr double kInt32Max = 2147483647.0;
const char* const kTensorNames[] = {"x", "h", "ih", "hh", "u_in", "u_out", "r_in", "r_out", "n_in", "n_out"};

[[noreturn]] void fail(const std::string& what) { throw Error("gru", "params: " + what); }

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer())
    fail(where + " needs integer \"" + key + "\"");
  const auto& v = j[key];
  if (!json_int_within(v, lo, hi))
    fail(where + "." + key + " = " + v.dump() + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v.get<int64_t>();
}

QTensor tensor_from(const nlohmann::json& j, const std::string& where) {
  QTensor t;
  t.bits = static_cast<int>(get_int(j, "bits", where, 2, 16));
  if (!j.contains("signed") || !j["signed"].is_boolean()) fail(where + " needs boolean \"signed\"");
  t.is_signed = j["signed"].get<bool>();
  t.shift = static_cast<int>(get_int(j, "shift", where, -32, 32));
  t.zp = get_int(j, "zp", where, INT32_MIN, INT32_MAX);
  return t;
}

nlohmann::json tensor_json(const QTensor& t) {
  return {{"bits", t.bits}, {"signed", t.is_signed}, {"shift", t.shift}, {"zp", t.zp}};
}

// "shift": one number (per tensor), three (per gate) or 3H (per channel).
QWeight weight_from(const nlohmann::json& j, const std::string& where, int max_bits, int64_t hidden) {
  QWeight w;
  w.bits = static_cast<int>(get_int(j, "bits", where, 2, max_bits));
  if (!j.contains("shift")) fail(where + " needs \"shift\"");
  const auto& s = j["shift"];
  auto one = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < -32 || v.get<int64_t>() > 32)
      fail(where + ".shift " + json_excerpt(v) + " is not an integer in -32..32");
    return v.get<int>();
  };
  if (s.is_number()) {
    w.shift.assign(static_cast<size_t>(3 * hidden), one(s));
  } else if (s.is_array() && s.size() == 3) {
    for (int g = 0; g < 3; ++g) w.shift.insert(w.shift.end(), static_cast<size_t>(hidden), one(s[g]));
  } else if (s.is_array() && static_cast<int64_t>(s.size()) == 3 * hidden) {
    for (const auto& v : s) w.shift.push_back(one(v));
  } else {
    fail(where + ".shift must be a number, 3 numbers (per gate) or 3·hidden_size = " + std::to_string(3 * hidden) +
         " numbers (per channel), not " + json_excerpt(s, 60));
  }
  return w;
}

nlohmann::json weight_json(const QWeight& w, int64_t hidden) {
  nlohmann::json shift;
  const bool one = std::all_of(w.shift.begin(), w.shift.end(), [&](int s) { return s == w.shift[0]; });
  bool per_gate = true;
  for (int64_t c = 0; c < 3 * hidden; ++c) per_gate &= w.shift[c] == w.shift[(c / hidden) * hidden];
  if (one) shift = w.shift[0];
  else if (per_gate) shift = {w.shift[0], w.shift[hidden], w.shift[2 * hidden]};
  else shift = w.shift;
  return {{"bits", w.bits}, {"shift", shift}};
}

std::vector<Segment> segments_from(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("segments") || !j["segments"].is_array() || j["segments"].empty() ||
      j["segments"].size() > 64)
    fail(where + " needs \"segments\": 1..64 of [threshold, q_b, n, term_c]");
  std::vector<Segment> out;
  for (const auto& s : j["segments"]) {
    if (!s.is_array() || s.size() != 4 || !std::all_of(s.begin(), s.end(), [](auto& v) { return v.is_number_integer(); }))
      fail(where + " segment " + json_excerpt(s, 60) + " is not [threshold, q_b, n, term_c] integers");
    Segment g{s[0].get<int64_t>(), s[1].get<int64_t>(), s[2].get<int>(), s[3].get<int64_t>()};
    if (std::llabs(g.q_b) > (int64_t{1} << 24) || g.n < -16 || g.n > 48 || g.term_c < INT32_MIN ||
        g.term_c > INT32_MAX || g.threshold < -(int64_t{1} << 20) || g.threshold > (int64_t{1} << 20))
      fail(where + " segment " + json_excerpt(s, 60) +
           " is out of range (|q_b| <= 2^24, n in -16..48, term_c in int32, |threshold| <= 2^20)");
    if (!out.empty() && g.threshold <= out.back().threshold)
      fail(where + " thresholds must increase: " + std::to_string(g.threshold) + " after " +
           std::to_string(out.back().threshold));
    out.push_back(g);
  }
  return out;
}

// The largest |result| of rshift_round(v, n) over |v| <= bound (as a double: no overflow).
double rescaled_bound(double bound, int n) { return n <= 0 ? std::ldexp(bound, -n) : std::floor(std::ldexp(bound, -n)) + 1; }

// The largest |q - zp| over a tensor's range.
double spread(const QTensor& t) {
  return static_cast<double>(std::max(std::llabs(t.lo() - t.zp), std::llabs(t.hi() - t.zp)));
}

void require_int32(double bound, const std::string& what) {
  if (bound > kInt32Max)
    fail(what + " could reach " + std::to_string(static_cast<long double>(bound)) +
         ", past int32; lower the bit widths or raise the shifts");
}

// Round half to even without touching the FPU's rounding mode (nearbyint
// would follow whatever mode the calling program set).
double round_half_even(double y) {
  double r = std::floor(y + 0.5);
  if (r - y == 0.5 && std::fmod(r, 2.0) != 0.0) r -= 1.0;
  return r;
}

double activation(const std::string& fn, double x) { return fn == "tanh" ? std::tanh(x) : 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

int64_t rshift_round(int64_t x, int n) {
  if (n <= 0) return x * (int64_t{1} << -n);
  if (n >= 64) return 0;  // |x| < 2^63: below one half
  const uint64_t a = x < 0 ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  uint64_t q = a >> n;
  const uint64_t r = a & ((uint64_t{1} << n) - 1), half = uint64_t{1} << (n - 1);
  if (r > half || (r == half && (q & 1))) ++q;  // ties to even
  return x < 0 ? -static_cast<int64_t>(q) : static_cast<int64_t>(q);
}

int64_t eval_lut(const Lut& lut, int64_t q_x) {
  q_x = lut.in.saturate(q_x);
  size_t i = 0;
  while (i + 1 < lut.segments.size() && q_x >= lut.segments[i].threshold) ++i;
  const Segment& s = lut.segments[i];
  return lut.out.saturate(rshift_round(s.q_b * (q_x - lut.in.zp), s.n) + s.term_c);
}

int64_t lut_target(const Lut& lut, int64_t q_x) {
  const double x = std::ldexp(static_cast<double>(q_x - lut.in.zp), -lut.in.shift);
  const double y = std::ldexp(activation(lut.fn, x), lut.out.shift);
  return lut.out.saturate(static_cast<int64_t>(round_half_even(y)) + lut.out.zp);
}

LutError lut_error(const Lut& lut) {
  LutError e;
  for (int64_t q = lut.in.lo(); q <= lut.in.hi(); ++q) {
    const int64_t d = std::llabs(eval_lut(lut, q) - lut_target(lut, q));
    if (d > e.max_lsb) e = {d, q};
  }
  return e;
}

Lut fit_lut(const std::string& fn, const QTensor& in, const QTensor& out, int segments) {
  if (fn != "sigmoid" && fn != "tanh") fail("LUT function '" + fn + "' (expected sigmoid or tanh)");
  if (segments < 1 || segments > 64) fail("lut_segments = " + std::to_string(segments) + " is outside 1..64");
  Lut lut{fn, in, out, {}};
  const int64_t lo = in.lo(), hi = in.hi();
  std::vector<int64_t> target(static_cast<size_t>(hi - lo + 1));
  for (int64_t q = lo; q <= hi; ++q) target[q - lo] = lut_target(lut, q);
  const auto at = [&](int64_t q) { return target[q - lo]; };
  // Where the output still moves: [a, b]; outside it a flat piece is exact.
  int64_t a = lo, b = hi;
  while (a < hi && at(a) == at(lo)) ++a;
  while (b > lo && at(b) == at(hi)) --b;
  if (a > b) {  // constant over the whole input range
    lut.segments.push_back({hi + 1, 0, 0, at(lo)});
    return lut;
  }
  --a;  // keep the last flat input in the first sloped piece's reach
  a = std::max(a, lo);
  std::vector<std::pair<int64_t, int64_t>> pieces;  // inclusive input ranges
  const bool flat_low = a > lo && segments >= 3, flat_high = b < hi && segments >= 3;
  const int sloped = segments - (flat_low ? 1 : 0) - (flat_high ? 1 : 0);
  const int64_t s0 = flat_low ? a : lo, s1 = flat_high ? b : hi;
  if (flat_low) pieces.push_back({lo, a - 1});
  // Breakpoints: a line's largest error over a piece of width w is about
  // w²·|f''|/8, so pieces of equal ∫ sqrt|f''| have equal errors; a floor of
  // a tenth of the largest density keeps pieces near the inflection finite.
  std::vector<double> mass(static_cast<size_t>(s1 - s0 + 2), 0.0);
  {
    std::vector<double> density(static_cast<size_t>(s1 - s0 + 1));
    double peak = 0;
    for (int64_t q = s0; q <= s1; ++q) {
      const double xv = std::ldexp(static_cast<double>(q - in.zp), -in.shift), f = activation(fn, xv);
      const double f2 = fn == "tanh" ? -2 * f * (1 - f * f) : f * (1 - f) * (1 - 2 * f);
      density[q - s0] = std::sqrt(std::fabs(f2));
      peak = std::max(peak, density[q - s0]);
    }
    for (size_t i = 0; i < density.size(); ++i) mass[i + 1] = mass[i] + density[i] + 0.1 * peak + 1e-300;
  }
  int64_t from = s0;
  for (int i = 1; i <= sloped; ++i) {
    int64_t to = s1;
    if (i < sloped) {
      const double goal = mass.back() * i / sloped;
      to = s0 + (std::lower_bound(mass.begin(), mass.end(), goal) - mass.begin()) - 1;
      to = std::clamp(to, from, s1);
    }
    if (to >= from) pieces.push_back({from, to});
    from = to + 1;
    if (from > s1) break;
  }
  if (flat_high) pieces.push_back({b + 1, hi});

  for (size_t p = 0; p < pieces.size(); ++p) {
    const auto [from, to] = pieces[p];
    const double slope = to > from ? static_cast<double>(at(to) - at(from)) / static_cast<double>(to - from) : 0.0;
    // The chord through the piece's ends, lowered by half its largest bulge.
    double dmin = 0, dmax = 0;
    for (int64_t q = from; q <= to; ++q) {
      const double d = static_cast<double>(at(q)) - (static_cast<double>(at(from)) + slope * static_cast<double>(q - from));
      dmin = std::min(dmin, d), dmax = std::max(dmax, d);
    }
    const double c0 = static_cast<double>(at(from)) - slope * static_cast<double>(from - in.zp) + (dmin + dmax) / 2;
    Segment s;
    s.threshold = p + 1 < pieces.size() ? pieces[p + 1].first : hi + 1;
    if (slope != 0.0) {
      // As many fraction bits as keep |q_b| below 2^15.
      s.n = std::clamp(14 - static_cast<int>(std::ceil(std::log2(std::fabs(slope)))), 0, 40);
      s.q_b = static_cast<int64_t>(round_half_even(std::ldexp(slope, s.n)));
    }
    // term_c: the value near c0 with the smallest largest error over the piece.
    Lut one{fn, in, out, {s}};
    int64_t best = INT64_MAX;
    const int64_t centre = static_cast<int64_t>(round_half_even(c0));
    for (int64_t c = centre - 3; c <= centre + 3; ++c) {
      one.segments[0].term_c = c;
      int64_t worst = 0;
      for (int64_t q = from; q <= to; ++q) worst = std::max<int64_t>(worst, std::llabs(eval_lut(one, q) - at(q)));
      if (worst < best) best = worst, s.term_c = c;
    }
    lut.segments.push_back(s);
  }
  return lut;
}

GruParams GruParams::from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("the document must be a JSON object");
  GruParams p;
  p.input_size = get_int(j, "input_size", "params", 1, 16384);
  p.hidden_size = get_int(j, "hidden_size", "params", 1, 16384);
  if (j.contains("lut_segments")) p.lut_segments = static_cast<int>(get_int(j, "lut_segments", "params", 8, 64));
  if (!j.contains("tensors") || !j["tensors"].is_object()) fail("needs \"tensors\"");
  QTensor* slots[] = {&p.x, &p.h, &p.ih, &p.hh, &p.u_in, &p.u_out, &p.r_in, &p.r_out, &p.n_in, &p.n_out};
  for (size_t i = 0; i < std::size(kTensorNames); ++i) {
    const char* name = kTensorNames[i];
    if (!j["tensors"].contains(name)) fail("tensors needs \"" + std::string(name) + "\"");
    *slots[i] = tensor_from(j["tensors"][name], std::string("tensors.") + name);
  }
  if (!j.contains("weights") || !j["weights"].is_object()) fail("needs \"weights\"");
  const auto& w = j["weights"];
  for (const char* name : {"W", "R", "bw", "br"})
    if (!w.contains(name)) fail("weights needs \"" + std::string(name) + "\"");
  p.W = weight_from(w["W"], "weights.W", 8, p.hidden_size);
  p.R = weight_from(w["R"], "weights.R", 8, p.hidden_size);
  p.bw = weight_from(w["bw"], "weights.bw", 32, p.hidden_size);
  p.br = weight_from(w["br"], "weights.br", 32, p.hidden_size);
  const std::pair<Lut*, std::pair<const char*, std::pair<const QTensor*, const QTensor*>>> luts[] = {
      {&p.u_lut, {"u", {&p.u_in, &p.u_out}}}, {&p.r_lut, {"r", {&p.r_in, &p.r_out}}}, {&p.n_lut, {"n", {&p.n_in, &p.n_out}}}};
  for (const auto& [lut, info] : luts) {
    const std::string fn = std::string(info.first) == "n" ? "tanh" : "sigmoid";
    if (j.contains("luts") && j["luts"].contains(info.first))
      *lut = {fn, *info.second.first, *info.second.second,
              segments_from(j["luts"][info.first], std::string("luts.") + info.first)};
    else
      *lut = fit_lut(fn, *info.second.first, *info.second.second, p.lut_segments);
  }
  p.validate();
  return p;
}

nlohmann::json GruParams::to_json() const {
  nlohmann::json t;
  const QTensor* slots[] = {&x, &h, &ih, &hh, &u_in, &u_out, &r_in, &r_out, &n_in, &n_out};
  for (size_t i = 0; i < std::size(kTensorNames); ++i) t[kTensorNames[i]] = tensor_json(*slots[i]);
  nlohmann::json luts;
  for (const auto& [name, lut] : {std::pair{"u", &u_lut}, std::pair{"r", &r_lut}, std::pair{"n", &n_lut}}) {
    nlohmann::json segs = nlohmann::json::array();
    for (const auto& s : lut->segments) segs.push_back({s.threshold, s.q_b, s.n, s.term_c});
    luts[name] = {{"segments", segs}};
  }
  return {{"input_size", input_size},
          {"hidden_size", hidden_size},
          {"lut_segments", lut_segments},
          {"tensors", t},
          {"weights",
           {{"W", weight_json(W, hidden_size)},
            {"R", weight_json(R, hidden_size)},
            {"bw", weight_json(bw, hidden_size)},
            {"br", weight_json(br, hidden_size)}}},
          {"luts", luts}};
}

void GruParams::validate() const {
  const QTensor* slots[] = {&x, &h, &ih, &hh, &u_in, &u_out, &r_in, &r_out, &n_in, &n_out};
  for (size_t i = 0; i < std::size(kTensorNames); ++i) {
    const QTensor& t = *slots[i];
    if (t.bits < 2 || t.bits > 16) fail(std::string("tensors.") + kTensorNames[i] + ".bits = " + std::to_string(t.bits) + " is outside 2..16");
    if (t.shift < -32 || t.shift > 32) fail(std::string("tensors.") + kTensorNames[i] + ".shift is outside -32..32");
    if (t.zp < t.lo() || t.zp > t.hi())
      fail(std::string("tensors.") + kTensorNames[i] + ".zp = " + std::to_string(t.zp) + " is outside its " +
           std::to_string(t.bits) + "-bit " + (t.is_signed ? "signed" : "unsigned") + " range " +
           std::to_string(t.lo()) + ".." + std::to_string(t.hi()));
  }
  // (1 - u) uses round(2^shift) + zp: a whole number only for shift >= 0.
  if (u_out.shift < 0) fail("tensors.u_out.shift = " + std::to_string(u_out.shift) + " must be >= 0 (sigmoid outputs lie in [0, 1])");
  const size_t rows = static_cast<size_t>(3 * hidden_size);
  for (const auto& [name, w] : {std::pair{"W", &W}, std::pair{"R", &R}, std::pair{"bw", &bw}, std::pair{"br", &br}})
    if (w->shift.size() != rows) fail(std::string("weights.") + name + " has " + std::to_string(w->shift.size()) + " shifts, not 3·hidden_size");
  for (const auto& [name, lut] : {std::pair{"u", &u_lut}, std::pair{"r", &r_lut}, std::pair{"n", &n_lut}}) {
    if (lut->segments.empty() || lut->segments.size() > 64) fail(std::string("luts.") + name + " needs 1..64 segments");
    for (const auto& s : lut->segments)
      require_int32(rescaled_bound(static_cast<double>(std::llabs(s.q_b)) * spread(lut->in), s.n) +
                        static_cast<double>(std::llabs(s.term_c)),
                    std::string("luts.") + name + "'s result");
  }

  // The int32 rule, channel by channel for the two linear layers.
  const double C = static_cast<double>(input_size), H = static_cast<double>(hidden_size);
  for (size_t c = 0; c < rows; ++c) {
    const std::string ch = " (channel " + std::to_string(c) + ")";
    const int gx = W.shift[c] + x.shift, gh = R.shift[c] + h.shift;  // shifts of the GEMM sums
    const double bias_x = rescaled_bound(static_cast<double>(bw.max_abs()), bw.shift[c] - gx);
    const double bias_h = rescaled_bound(static_cast<double>(br.max_abs()), br.shift[c] - gh);
    require_int32(bias_x, "bw in the GEMM's scale" + ch);
    require_int32(bias_h, "br in the GEMM's scale" + ch);
    require_int32(rescaled_bound(C * W.max_abs() * spread(x) + bias_x, gx - ih.shift) + std::fabs(ih.zp),
                  "W·x + bw rescaled to ih" + ch);
    require_int32(rescaled_bound(H * R.max_abs() * spread(h) + bias_h, gh - hh.shift) + std::fabs(hh.zp),
                  "R·h + br rescaled to hh" + ch);
  }
  for (const auto& [name, in] : {std::pair{"u_in", &u_in}, std::pair{"r_in", &r_in}})
    require_int32(rescaled_bound(spread(ih), ih.shift - in->shift) + rescaled_bound(spread(hh), hh.shift - in->shift) +
                      std::fabs(in->zp),
                  std::string("the gate input ") + name);
  require_int32(rescaled_bound(spread(ih), ih.shift - n_in.shift) +
                    rescaled_bound(spread(r_out) * spread(hh), r_out.shift + hh.shift - n_in.shift) + std::fabs(n_in.zp),
                "the gate input n_in");
  const double aligned = rescaled_bound(spread(n_out), n_out.shift - h.shift);
  require_int32(aligned + std::fabs(h.zp), "n_out aligned to h");
  const double one = std::ldexp(1.0, u_out.shift) + static_cast<double>(u_out.zp);
  const double one_minus_u = std::max(std::fabs(one - u_out.lo()), std::fabs(one - u_out.hi()));
  require_int32(rescaled_bound(spread(u_out) * spread(h) + one_minus_u * aligned, u_out.shift) + std::fabs(h.zp),
                "the new h before saturation");
}

}  // namespace qjit::codegen::gru
