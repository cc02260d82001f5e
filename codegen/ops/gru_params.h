// gru_quant's quantization parameters: one JSON document per GRU layer
// (../shared/seeds/000_*: a Haste GRU in pure fixed point). Every tensor has
// a power-of-two scale 2^-shift, a zero point and its own bit width and
// signedness; W, R, bw and br are symmetric with one shift per output channel
// of the 3H gate rows (u, r, n in that order); sigmoid and tanh are piecewise
// linear with segments fitted here from the input and output parameters.
//
// The document (every key required unless marked):
//   {"input_size": C, "hidden_size": H,
//    "tensors": {"x"|"h"|"ih"|"hh"|"u_in"|"u_out"|"r_in"|"r_out"|"n_in"|"n_out":
//                  {"bits": 2..16, "signed": bool, "shift": -32..32, "zp": int}},
//    "weights": {"W"|"R": {"bits": 2..8, "shift": s | [s_u, s_r, s_n] | [3H shifts]},
//                "bw"|"br": {"bits": 2..32, "shift": as above}},
//    "luts" (optional; fitted when absent):
//               {"u"|"r"|"n": {"segments": [[threshold, q_b, n, term_c], ...]}},
//    "lut_segments" (optional, 8..64, default 16): segments per fitted LUT}
// ih and hh are the two linear outputs (W·x + bw, R·h + br), u/r/n_in the
// gate inputs and u/r/n_out the gate outputs (sigmoid, sigmoid, tanh).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qjit::codegen::gru {

// rshift_round(x, n): n <= 0: x · 2^-n exactly; n > 0: round(|x| / 2^n) with
// ties to even, sign restored (../shared/DESIGN.md, numeric conventions).
int64_t rshift_round(int64_t x, int n);

// A quantized tensor: value = (q - zp) · 2^-shift, q in [lo(), hi()].
struct QTensor {
  int bits = 8;
  bool is_signed = true;
  int shift = 0;
  int64_t zp = 0;
  int64_t lo() const { return is_signed ? -(int64_t{1} << (bits - 1)) : 0; }
  int64_t hi() const { return is_signed ? (int64_t{1} << (bits - 1)) - 1 : (int64_t{1} << bits) - 1; }
  int64_t saturate(int64_t q) const { return q < lo() ? lo() : q > hi() ? hi() : q; }
};

// A symmetric weight or bias: q in [-(2^(bits-1)), 2^(bits-1) - 1], one shift per gate row.
struct QWeight {
  int bits = 8;
  std::vector<int> shift;  // 3H entries
  int64_t max_abs() const { return int64_t{1} << (bits - 1); }
};

// One piece of a piecewise-linear activation: y = rshift_round(q_b · (q_x - zp_in), n) + term_c.
struct Segment {
  int64_t threshold = 0;  // the segment serves q_x < threshold (the last one: every q_x past the others)
  int64_t q_b = 0;
  int n = 0;
  int64_t term_c = 0;     // holds the output zero point
};

struct Lut {
  std::string fn;  // "sigmoid" | "tanh"
  QTensor in, out;
  std::vector<Segment> segments;
};

// Segment lookup and evaluation: q_x clamped to in's range, the first segment
// with q_x < threshold (else the last), the result saturated to out's range.
int64_t eval_lut(const Lut& lut, int64_t q_x);

// The exact target of a LUT entry: round_half_even(f((q_x - zp_in) · 2^-shift_in) · 2^shift_out) + zp_out, saturated.
int64_t lut_target(const Lut& lut, int64_t q_x);

// Fits `segments` pieces of fn from in to out (our own fit): flat pieces
// where fn no longer moves the output, breakpoints between them at equal
// ∫ sqrt|f''| (a line's error over a piece grows as width²·|f''|), each piece
// the line through its end points lowered by half its largest bulge (the
// minimax line of a convex or concave piece), quantised, then each term_c
// nudged to the value with the smallest largest error over the piece.
Lut fit_lut(const std::string& fn, const QTensor& in, const QTensor& out, int segments);

// Largest |eval_lut - lut_target| over every input of the LUT, in output LSBs, and where.
struct LutError {
  int64_t max_lsb = 0;
  int64_t at = 0;
};
LutError lut_error(const Lut& lut);

struct GruParams {
  int64_t input_size = 0, hidden_size = 0;
  QTensor x, h, ih, hh, u_in, u_out, r_in, r_out, n_in, n_out;
  QWeight W, R, bw, br;
  Lut u_lut, r_lut, n_lut;
  int lut_segments = 16;

  // Parses and validates (throws Error("gru", ...) naming the key and value).
  static GruParams from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;  // luts included
  // Ranges, shifts and the int32 rule: every rescaled value the forward pass
  // adds or stores fits int32 for every input in range.
  void validate() const;
};

}  // namespace qjit::codegen::gru
