// Random gru_quant params documents for tests: bit widths in a range, shifts
// near the ones that cover a GRU's usual value ranges (jittered), zero points
// often at their limits, per-channel weight shifts, 8..32 LUT segments; drawn
// again until the document passes validation (the int32 rule).
#pragma once
#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

#include "codegen/error.h"
#include "codegen/ops/gru_params.h"

namespace qjit::test {

inline nlohmann::json random_gru_params(std::mt19937_64& rng, int64_t C, int64_t H, int bits_lo, int bits_hi) {
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto tensor = [&](int shift_below_bits, bool is_signed) {
      const int bits = pick(bits_lo, bits_hi);
      const codegen::gru::QTensor t{bits, is_signed, 0, 0};
      int64_t zp = 0;
      switch (rng() % 4) {
        case 0: zp = t.lo(); break;
        case 1: zp = t.hi(); break;
        case 2: zp = t.lo() + static_cast<int64_t>(rng() % static_cast<uint64_t>(t.hi() - t.lo() + 1)); break;
        default: zp = is_signed ? 0 : t.lo();
      }
      return nlohmann::json{{"bits", bits}, {"signed", is_signed}, {"shift", std::max(0, bits - shift_below_bits + pick(-2, 2))}, {"zp", zp}};
    };
    nlohmann::json doc = {{"input_size", C}, {"hidden_size", H}, {"lut_segments", pick(8, 32)}};
    doc["tensors"] = {{"x", tensor(3, true)},     {"h", tensor(1, true)},      {"ih", tensor(5, true)},
                      {"hh", tensor(5, true)},    {"u_in", tensor(5, true)},   {"u_out", tensor(0, rng() % 4 == 0)},
                      {"r_in", tensor(5, true)},  {"r_out", tensor(0, false)}, {"n_in", tensor(5, true)},
                      {"n_out", tensor(1, true)}};
    auto shifts = [&](int lo, int hi) {
      nlohmann::json s = nlohmann::json::array();
      for (int64_t r = 0; r < 3 * H; ++r) s.push_back(pick(lo, hi));
      return s;
    };
    doc["weights"] = {{"W", {{"bits", pick(2, 8)}, {"shift", shifts(5, 9)}}},
                      {"R", {{"bits", pick(2, 8)}, {"shift", {pick(5, 9), pick(5, 9), pick(5, 9)}}}},
                      {"bw", {{"bits", pick(8, 24)}, {"shift", shifts(10, 16)}}},
                      {"br", {{"bits", pick(8, 24)}, {"shift", pick(10, 16)}}}};
    try {
      codegen::gru::GruParams::from_json(doc);
      return doc;
    } catch (const Error&) {
    }
  }
  throw Error("test", "no valid random gru params in 1000 draws");
}

}  // namespace qjit::test
