// FP16 lookup tables of ../shared/seeds/003_* (FPLUT): 11 cut points
// c0 < ... < c10 split the input range into 10 intervals. Intervals 0 and 9
// are one linear segment each; intervals 1..8 hold 32 samples each:
//   T[0] = f(c0); T[1 + 32(i-1) + k] = f(c_i + k (c_{i+1} - c_i) / 32)
//   for i = 1..8, k = 0..31; T[257] = f(c9); T[258] = f(c10)
// 259 values stored as fp16 (clamped to ±65504). Scales s_i = 1/(c1-c0),
// 32/(c_{i+1}-c_i), 1/(c10-c9) turn x - c_i into a position in interval i.
// The lookup itself (the exact fp32 arithmetic) is tuner/reference/fp_lut.cpp.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

namespace qjit::codegen::lut {

inline constexpr int kCutCount = 11;
inline constexpr int kEntries = 259;
// First table index and last local index of each interval.
inline constexpr int kPre[10] = {0, 1, 33, 65, 97, 129, 161, 193, 225, 257};
inline constexpr int kLen[10] = {1, 32, 32, 32, 32, 32, 32, 32, 32, 1};

struct Table {
  std::string fn;                          // function the values sample ("custom" for given values)
  std::array<float, kCutCount> cuts{};     // fp16-representable, strictly increasing
  std::array<uint16_t, kEntries> values{};  // fp16 bit patterns
  std::array<float, 10> scales{};
};

// Functions with a float64 definition: silu, gelu (erf form), gelu_tanh,
// sigmoid, tanh, exp, softplus, sin, cos.
const std::vector<std::string>& function_names();
double reference_fn(const std::string& fn, double x);  // throws qjit::Error("spec", ...) for an unknown name
// sin and cos first reduce x modulo 2π into [-π, π], as the seed does.
bool reduces_angle(const std::string& fn);

// The seed's SiLU cut points (seed 003, section 4).
std::array<float, kCutCount> seed_silu_cuts();
// qjit's cut points for fn: fitted by `qjit lut fit` (max abs error over all
// finite fp16 inputs) and recorded in fp_lut_table.cpp.
std::array<float, kCutCount> default_cuts(const std::string& fn);

std::array<float, 10> scales_of(const std::array<float, kCutCount>& cuts);
// Values sampled from fn. Throws qjit::Error("spec", ...) for bad cut points.
Table build(const std::string& fn, const std::array<float, kCutCount>& cuts);
// Given values (a table not defined by a function).
Table from_values(const std::array<float, kCutCount>& cuts, const std::array<uint16_t, kEntries>& values);
// Throws qjit::Error("spec", ...) unless the cuts are finite, fp16-exact, increasing.
void check_cuts(const std::array<float, kCutCount>& cuts);

// JSON: {"fn": name, "cuts": [11 numbers]} or {"cuts": [...], "values": [259 numbers]}.
nlohmann::json to_json(const Table& t);
Table from_json(const nlohmann::json& j);

// Compact spec form: fp16 bit patterns as hex, "c0:c1:...".
std::string encode_halves(const uint16_t* bits, int n);
std::vector<uint16_t> decode_halves(const std::string& s, int n);  // throws qjit::Error("spec", ...)

}  // namespace qjit::codegen::lut
