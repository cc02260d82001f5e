#include "codegen/ops/fp_lut_table.h"
#include <cmath>
#include <cstdio>
#include "codegen/error.h"
#include "codegen/numeric.h"

namespace qjit::codegen::lut {

const std::vector<std::string>& function_names() {
  static const std::vector<std::string> names = {"silu", "gelu", "gelu_tanh", "sigmoid", "tanh",
                                                 "exp",  "softplus", "sin", "cos"};
  return names;
}

bool reduces_angle(const std::string& fn) { return fn == "sin" || fn == "cos"; }

double reference_fn(const std::string& fn, double x) {
  if (fn == "silu") return x / (1.0 + std::exp(-x));
  if (fn == "gelu") return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  if (fn == "gelu_tanh") {
    const double k = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
  }
  if (fn == "sigmoid") return 1.0 / (1.0 + std::exp(-x));
  if (fn == "tanh") return std::tanh(x);
  if (fn == "exp") return std::exp(x);
  if (fn == "softplus") return x > 30 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  if (fn == "sin") return std::sin(x);
  if (fn == "cos") return std::cos(x);
  std::string names;
  for (auto& n : function_names()) names += (names.empty() ? "" : ", ") + n;
  throw Error("spec", "unknown LUT function '" + fn + "'; known: " + names);
}

std::array<float, kCutCount> seed_silu_cuts() {
  // ../shared/seeds/003_*, section 4 ("具体数值示例").
  return {-20.359375f,        -17.109375f,          -8.3671875f, -1.9755859375f, -0.255615234375f,
          -0.007244110107421875f, 0.0072174072265625f, 0.228515625f, 1.58203125f,    10.46875f,
          65504.0f};
}

std::array<float, kCutCount> default_cuts(const std::string& fn) {
  // Fitted on 2026-11-22 with `qjit lut fit`: max abs error over every finite
  // fp16 input first, then over the inputs with |f(x)| <= 1 (exp: --metric
  // rel, its outputs span 1e-8..65504). SiLU started from the seed's cuts
  // (`--from seed --seconds 60`) with the final fitter; the others from
  // hand-picked sets with its first version (interval-local moves only).
  // c0/c10 bound the domain: beyond them f is constant or linear at fp16
  // precision. Every value is fp16-exact.
  if (fn == "silu")
    return {-20.359375f,  -17.109375f,         -7.43359375f,          -1.9755859375f, -0.2489013671875f,
            -0.007244110107421875f, 0.0072174072265625f, 0.0261688232421875f, 1.5068359375f,  13.25f,
            65504.0f};
  if (fn == "gelu") return {-8.0f, -5.0f, -3.0f, -2.0f, -1.0f, -0.25f, 0.078125f, 0.75f, 1.71875f, 8.0f, 65504.0f};
  if (fn == "gelu_tanh") return {-8.0f, -5.0f, -3.0f, -2.0f, -1.0f, -0.25f, 0.25f, 0.75f, 2.0f, 8.0f, 65504.0f};
  if (fn == "sigmoid")
    return {-17.0f, -12.0f, -8.0f, -4.0f, -2.0f, 3.24249267578125e-05f, 3.1875f, 3.90625f, 8.21875f, 16.25f, 17.0f};
  if (fn == "tanh") return {-9.0f, -5.0f, -3.0f, -1.5f, -0.75f, 0.0f, 0.75f, 1.5f, 3.0f, 5.0f, 9.0f};
  if (fn == "exp") return {-17.0f, -14.9609375f, -10.0f, -5.0f, -2.5f, 0.0f, 2.5f, 5.0f, 7.5f, 11.0f, 11.0859375f};
  if (fn == "softplus")
    return {-17.0f, -12.0f, -8.0f, -4.0f, -1.755859375f, 9.548664093017578e-05f, 1.47265625f, 4.0f, 8.0f, 16.0f, 65504.0f};
  if (fn == "sin")
    return {-3.142578125f, -2.5f, -1.875f, -1.25f, -0.625f, 0.0f, 0.625f, 1.25f, 1.875f, 2.5f, 3.142578125f};
  if (fn == "cos")
    return {-3.142578125f, -3.0f, -1.875f, -1.25f, -0.625f, 0.0f, 0.625f, 1.25f, 1.875f, 3.0f, 3.142578125f};
  reference_fn(fn, 0.0);  // throws the "unknown function" error
  return {};
}

void check_cuts(const std::array<float, kCutCount>& c) {
  for (int i = 0; i < kCutCount; ++i) {
    if (!std::isfinite(c[i]) || half_to_float(float_to_half(c[i])) != c[i])
      throw Error("spec", "LUT cut point c" + std::to_string(i) + " = " + std::to_string(c[i]) +
                              " is not a finite fp16 value");
    if (i > 0 && !(c[i] > c[i - 1]))
      throw Error("spec", "LUT cut points must increase: c" + std::to_string(i) + " = " + std::to_string(c[i]) +
                              " <= c" + std::to_string(i - 1) + " = " + std::to_string(c[i - 1]));
  }
}

std::array<float, 10> scales_of(const std::array<float, kCutCount>& c) {
  // Computed in float64 and rounded once to fp32; the kernel bakes these exact floats.
  std::array<float, 10> s{};
  for (int i = 0; i < 10; ++i)
    s[i] = static_cast<float>((i == 0 || i == 9 ? 1.0 : 32.0) / (static_cast<double>(c[i + 1]) - c[i]));
  return s;
}

static uint16_t to_table_half(double v) {
  // Values are clamped to the finite fp16 range before rounding (seed: clamp(-65504, 65504)).
  if (std::isnan(v)) return 0x7e00;
  v = std::fmax(-65504.0, std::fmin(65504.0, v));
  return float_to_half(static_cast<float>(v));
}

Table build(const std::string& fn, const std::array<float, kCutCount>& cuts) {
  check_cuts(cuts);
  Table t;
  t.fn = fn;
  t.cuts = cuts;
  t.scales = scales_of(cuts);
  t.values[0] = to_table_half(reference_fn(fn, cuts[0]));
  for (int i = 1; i <= 8; ++i) {
    const double step = (static_cast<double>(cuts[i + 1]) - cuts[i]) / 32.0;  // sample points in float64
    for (int k = 0; k < 32; ++k) t.values[1 + 32 * (i - 1) + k] = to_table_half(reference_fn(fn, cuts[i] + k * step));
  }
  t.values[257] = to_table_half(reference_fn(fn, cuts[9]));
  t.values[258] = to_table_half(reference_fn(fn, cuts[10]));
  return t;
}

Table from_values(const std::array<float, kCutCount>& cuts, const std::array<uint16_t, kEntries>& values) {
  check_cuts(cuts);
  Table t;
  t.fn = "custom";
  t.cuts = cuts;
  t.values = values;
  t.scales = scales_of(cuts);
  return t;
}

nlohmann::json to_json(const Table& t) {
  nlohmann::json j;
  j["fn"] = t.fn;
  j["cuts"] = t.cuts;
  std::vector<float> v;
  for (uint16_t b : t.values) v.push_back(half_to_float(b));
  j["values"] = v;
  return j;
}

Table from_json(const nlohmann::json& j) {
  try {
    std::array<float, kCutCount> cuts{};
    const auto& c = j.at("cuts");
    if (!c.is_array() || c.size() != kCutCount) throw Error("spec", "a LUT needs \"cuts\": 11 numbers");
    for (int i = 0; i < kCutCount; ++i) cuts[i] = c[i].get<float>();
    if (j.contains("values")) {
      const auto& v = j["values"];
      if (!v.is_array() || v.size() != kEntries) throw Error("spec", "a LUT's \"values\" must be 259 numbers");
      std::array<uint16_t, kEntries> bits{};
      for (int i = 0; i < kEntries; ++i) bits[i] = to_table_half(v[i].get<double>());
      Table t = from_values(cuts, bits);
      if (j.contains("fn") && j["fn"].is_string()) t.fn = j["fn"].get<std::string>();
      return t;
    }
    return build(j.at("fn").get<std::string>(), cuts);
  } catch (const nlohmann::json::exception& e) {
    throw Error("spec", std::string("malformed LUT JSON: ") + e.what());
  }
}

std::string encode_halves(const uint16_t* bits, int n) {
  std::string s;
  char buf[8];
  for (int i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%04x", i ? ":" : "", bits[i]);
    s += buf;
  }
  return s;
}

std::vector<uint16_t> decode_halves(const std::string& s, int n) {
  std::vector<uint16_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t colon = s.find(':', pos);
    std::string item = s.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    if (item.size() != 4 || item.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      throw Error("spec", "malformed fp16 hex '" + item + "' (expected 4 hex digits per value, ':'-separated)");
    out.push_back(static_cast<uint16_t>(std::stoul(item, nullptr, 16)));
    pos = colon == std::string::npos ? s.size() : colon + 1;
  }
  if (static_cast<int>(out.size()) != n)
    throw Error("spec", "expected " + std::to_string(n) + " fp16 values, got " + std::to_string(out.size()));
  return out;
}

}  // namespace qjit::codegen::lut
