// Calibration of gru_quant (../shared/seeds/000_*, a Haste GRU in fixed
// point): from a float GRU in PyTorch's layout and float calibration
// sequences to the layer's params document (codegen/ops/gru_params.h) and
// its integer weights in the seed's gate order.
//
//   1. The float64 forward (tuner/gru_float.h) runs over the sequences; per
//      time step each tensor of the document has a min and max over the
//      batch and its channels, folded into a running range with the seed's
//      EMA: the first step sets it, then min = 0.9·min_old + 0.1·min_step
//      (max alike).
//   2. Each range gets a power-of-two scale 2^-shift and a zero point:
//      x, h, ih, hh and the gate inputs asymmetric (signed), the sigmoid
//      outputs asymmetric unsigned, tanh's output symmetric (zp = 0), as
//      the seed's table A says; choose_asymmetric says how, and ZeroPoint
//      why the default places the zero point other than the seed does.
//   3. W and R symmetric per gate row (channel): the largest shift that
//      keeps the row's largest |w| within the weight bits.
//   4. bw and br per channel at exactly the scale of their GEMM sum
//      (shift_W[c] + shift_x, shift_R[c] + shift_h), so the seed's step B
//      adds them without a rounding; their bit width is the fewest bits that
//      hold every quantized bias.
//   5. The document must pass GruParams::validate() (the int32 rule). When
//      it does not, the scale of the tensor the failed rule names is made
//      one step coarser and the document rebuilt, until it passes; each step
//      is reported in `adjustments`.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/ops/gru_params.h"
#include "tuner/gru_float.h"
#include "tuner/reference/gru_quant.h"

namespace qjit::tuner {

// A tensor's range over time steps with the seed's per-step EMA.
struct EmaRange {
  double min = 0, max = 0;
  int64_t steps = 0;  // steps folded in; 0: never observed
  void add_step(double step_min, double step_max);
};

// The ranges of the params document's tensors, by its names.
struct GruRanges {
  EmaRange x, h, ih, hh, u_in, u_out, r_in, r_out, n_in, n_out;
  // (name, range) in the document's order: x, h, ih, hh, u_in, u_out, r_in, r_out, n_in, n_out.
  std::vector<std::pair<std::string, const EmaRange*>> named() const;
};

// Runs the float forward over x [T][N][C] from h0 [N][H] (empty: zeros) and
// tracks every range; h0 counts towards the first step's range of h, so a
// given initial state stays representable. `progress` (optional) is called
// after each step with (steps done, T).
GruRanges track_ranges(const GruFloatWeights& w, const std::vector<double>& x, const std::vector<double>& h0,
                       int64_t T, int64_t N, const std::function<void(int64_t, int64_t)>& progress = {});

// Where an asymmetric tensor's zero point puts the slack of a power-of-two
// scale (its codes span up to twice the calibrated range): `seed`, the
// seed's zp = round(−min / scale), all of it above max; `centred`, half
// below min and half above max, for ranges that hold both signs (a range on
// one side of zero keeps zero at its end code either way). EMA ranges lie
// inside the extremes the data reaches, so `seed` clips every signed
// tensor's lower tail; tests/test_gru_calibrate.cpp measures the difference.
enum class ZeroPoint { seed, centred };

struct GruQuantConfig {
  int activation_bits = 8;       // x, h, ih, hh, the gate inputs and outputs: 2..16
  int weight_bits = 8;           // W and R: 2..8
  int lut_segments = 16;         // per sigmoid/tanh LUT: 8..64
  bool sigmoid_unsigned = true;  // u_out and r_out unsigned (the seed's default)
  ZeroPoint zero_point = ZeroPoint::centred;
};

struct GruCalibration {
  nlohmann::json params;   // the params document: validated, its LUTs written out
  GruWeights weights;      // W [3H][C], R [3H][H], bw, br [3H]; gate rows u, r, n
  std::vector<std::string> adjustments;  // scales made coarser for the int32 rule, and why
};

// Steps 2-5 from ranges already tracked. Throws Error("argument", ...) for a
// config out of range, Error("gru", ...) when no coarsening satisfies the
// int32 rule.
GruCalibration quantize_gru(const GruFloatWeights& w, const GruRanges& ranges, const GruQuantConfig& cfg);

// All of it: track_ranges, then quantize_gru.
GruCalibration calibrate(const GruFloatWeights& w, const std::vector<double>& x, const std::vector<double>& h0,
                         int64_t T, int64_t N, const GruQuantConfig& cfg,
                         const std::function<void(int64_t, int64_t)>& progress = {});

// An asymmetric tensor for the range [min, max] widened to hold 0 (so zero is
// exact and the zero point lies in the code range): the largest shift (at
// most max_shift) whose 2^bits − 1 steps span the range, and the zero point
// lo + round(−low / scale), where lo is the lowest code and low the value it
// stands for: min (the seed's round(−min / scale), written for unsigned
// codes, whose lo is 0) or, centred, min less half the slack. An empty range
// (min = max = 0) is taken as [0, 1].
codegen::gru::QTensor choose_asymmetric(double min, double max, int bits, bool is_signed, ZeroPoint placement,
                                        int max_shift = 32);
// The largest shift with round(max_abs · 2^shift) <= 2^(bits−1) − 1 (a zero
// max_abs is taken as 1), within -32..32.
int choose_symmetric_shift(double max_abs, int bits);

// q = saturate(round_half_even(v · 2^shift) + zp); NaN throws Error("argument").
int32_t quantize(double v, const codegen::gru::QTensor& t);
std::vector<int32_t> quantize(const std::vector<double>& v, const codegen::gru::QTensor& t);
// v = (q − zp) · 2^−shift
double dequantize(int64_t q, const codegen::gru::QTensor& t);
std::vector<double> dequantize(const std::vector<int32_t>& q, const codegen::gru::QTensor& t);

// How close `got` is to `want` (same size): mean squared and mean absolute
// error, the largest absolute error, and the cosine similarity.
struct Accuracy {
  double mse = 0, mae = 0, max_abs = 0, cosine = 1;
};
Accuracy compare(const std::vector<double>& got, const std::vector<double>& want);

}  // namespace qjit::tuner
