// A float64 GRU in PyTorch's formulation and layout (torch.nn.GRU's
// documentation):
//   r  = σ(W_ir x + b_ir + W_hr h + b_hr)
//   z  = σ(W_iz x + b_iz + W_hz h + b_hz)
//   n  = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))
//   h' = (1 − z) ⊙ n + z ⊙ h
// with weight_ih_l0 [3H][C], weight_hh_l0 [3H][H], bias_ih_l0 [3H] and
// bias_hh_l0 [3H], the gate blocks stacked (r, z, n). This is the same GRU as
// the seed's (../shared/seeds/000_*: Haste, u = z, reset applied to
// R_n·h + b_rn), whose gate blocks are stacked (u, r, n) instead:
// torch_to_seed_gates reorders. The float model that calibration observes
// and that quantized results are compared against.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace qjit::tuner {

// One layer's weights as PyTorch stores them (gate blocks r, z, n).
struct GruFloatWeights {
  int64_t input_size = 0, hidden_size = 0;  // C, H
  std::vector<double> weight_ih, weight_hh, bias_ih, bias_hh;
  // Throws Error("argument", ...) naming the tensor whose size is not 3H·C, 3H·H or 3H.
  void check() const;
};

// Rows of a [3H][cols] matrix (cols = 1: a [3H] vector) from PyTorch's gate
// blocks (r, z, n) to the seed's (u = z, r, n): block 0 ← z, 1 ← r, 2 ← n.
std::vector<double> torch_to_seed_gates(const std::vector<double>& m, int64_t hidden, int64_t cols);

// The values of one time step for all N sequences, named as the seed's
// params document names its tensors. ih and hh are [N][3H] in the seed's
// gate order (u, r, n); the others [N][H].
struct GruFloatStep {
  int64_t t = 0, batch = 0;
  const double* x = nullptr;       // [N][C] the step's input
  const double* h_prev = nullptr;  // [N][H] the state entering the step
  std::vector<double> ih, hh;      // W·x + b_ih, R·h + b_hh
  std::vector<double> u_in, u_out, r_in, r_out, n_in, n_out;  // gate inputs and outputs (u = z)
  std::vector<double> h;           // the new state
};

// The forward pass over T steps: x [T][N][C], h0 [N][H] (empty: zeros);
// returns h [T][N][H]. `observe`, when given, sees every step.
std::vector<double> gru_float_forward(const GruFloatWeights& w, const std::vector<double>& x,
                                      const std::vector<double>& h0, int64_t T, int64_t N,
                                      const std::function<void(const GruFloatStep&)>& observe = {});

}  // namespace qjit::tuner
