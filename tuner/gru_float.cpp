#include "tuner/gru_float.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "codegen/error.h"

namespace qjit::tuner {
namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

void expect_size(const std::vector<double>& v, int64_t want, const char* name, const char* shape) {
  if (static_cast<int64_t>(v.size()) != want)
    throw Error("argument", std::string(name) + " has " + std::to_string(v.size()) + " values; expected " + shape +
                                " = " + std::to_string(want));
}

// y[c] = b[c] + Σ_k m[c][k]·v[k] for the 3H rows of m.
void affine(const std::vector<double>& m, const std::vector<double>& b, const double* v, int64_t cols, double* y) {
  for (size_t c = 0; c < b.size(); ++c) {
    double s = b[c];
    const double* row = &m[c * static_cast<size_t>(cols)];
    for (int64_t k = 0; k < cols; ++k) s += row[k] * v[k];
    y[c] = s;
  }
}

}  // namespace

void GruFloatWeights::check() const {
  if (input_size < 1 || hidden_size < 1)
    throw Error("argument", "GRU sizes input_size = " + std::to_string(input_size) +
                                ", hidden_size = " + std::to_string(hidden_size) + " must be positive");
  const int64_t rows = 3 * hidden_size;
  expect_size(weight_ih, rows * input_size, "weight_ih", "3H·C");
  expect_size(weight_hh, rows * hidden_size, "weight_hh", "3H·H");
  expect_size(bias_ih, rows, "bias_ih", "3H");
  expect_size(bias_hh, rows, "bias_hh", "3H");
}

std::vector<double> torch_to_seed_gates(const std::vector<double>& m, int64_t hidden, int64_t cols) {
  const size_t block = static_cast<size_t>(hidden * cols);
  if (m.size() != 3 * block)
    throw Error("argument", "a gate-stacked tensor has " + std::to_string(m.size()) + " values; expected 3·" +
                                std::to_string(hidden) + "·" + std::to_string(cols));
  std::vector<double> out(m.size());
  const size_t from[3] = {1, 0, 2};  // seed block g takes PyTorch block from[g]: u ← z, r ← r, n ← n
  for (size_t g = 0; g < 3; ++g)
    std::copy(m.begin() + static_cast<std::ptrdiff_t>(from[g] * block),
              m.begin() + static_cast<std::ptrdiff_t>((from[g] + 1) * block),
              out.begin() + static_cast<std::ptrdiff_t>(g * block));
  return out;
}

std::vector<double> gru_float_forward(const GruFloatWeights& w, const std::vector<double>& x,
                                      const std::vector<double>& h0, int64_t T, int64_t N,
                                      const std::function<void(const GruFloatStep&)>& observe) {
  w.check();
  const int64_t C = w.input_size, H = w.hidden_size;
  expect_size(x, T * N * C, "x", "T·N·C");
  if (!h0.empty()) expect_size(h0, N * H, "h0", "N·H");
  std::vector<double> h = h0.empty() ? std::vector<double>(static_cast<size_t>(N * H), 0.0) : h0;
  std::vector<double> out(static_cast<size_t>(T * N * H));
  std::vector<double> gi(static_cast<size_t>(3 * H)), gh(static_cast<size_t>(3 * H));
  GruFloatStep s;
  s.batch = N;
  for (auto* v : {&s.ih, &s.hh}) v->resize(static_cast<size_t>(N * 3 * H));
  for (auto* v : {&s.u_in, &s.u_out, &s.r_in, &s.r_out, &s.n_in, &s.n_out, &s.h}) v->resize(static_cast<size_t>(N * H));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      affine(w.weight_ih, w.bias_ih, &x[(t * N + n) * C], C, gi.data());
      affine(w.weight_hh, w.bias_hh, &h[n * H], H, gh.data());
      for (int64_t j = 0; j < H; ++j) {
        // PyTorch's blocks: r at [0, H), z at [H, 2H), n at [2H, 3H).
        const double r_in = gi[j] + gh[j], z_in = gi[H + j] + gh[H + j];
        const double r = sigmoid(r_in), z = sigmoid(z_in);
        const double n_in = gi[2 * H + j] + r * gh[2 * H + j], nn = std::tanh(n_in);
        const int64_t k = n * H + j, row = n * 3 * H;
        // The seed's blocks: u (= z) at [0, H), r at [H, 2H), n at [2H, 3H).
        s.ih[row + j] = gi[H + j], s.ih[row + H + j] = gi[j], s.ih[row + 2 * H + j] = gi[2 * H + j];
        s.hh[row + j] = gh[H + j], s.hh[row + H + j] = gh[j], s.hh[row + 2 * H + j] = gh[2 * H + j];
        s.u_in[k] = z_in, s.u_out[k] = z, s.r_in[k] = r_in, s.r_out[k] = r, s.n_in[k] = n_in, s.n_out[k] = nn;
        s.h[k] = (1 - z) * nn + z * h[k];
      }
    }
    if (observe) {
      s.t = t;
      s.x = &x[t * N * C];
      s.h_prev = h.data();
      observe(s);
    }
    h = s.h;
    std::copy(h.begin(), h.end(), out.begin() + t * N * H);
  }
  return out;
}

}  // namespace qjit::tuner
