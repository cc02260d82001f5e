// gru_quant calibration on the CPU: PyTorch's gate order to the seed's and
// the float64 GRU by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tuner/gru_float.h"

using namespace qjit::tuner;

TEST_CASE("gru calibrate: PyTorch's gate blocks (r, z, n) become the seed's (u = z, r, n)", "[gru]") {
  const int64_t H = 3, cols = 2;
  std::vector<double> m;
  for (int block = 0; block < 3; ++block)  // value = 100·block + 10·row + col
    for (int64_t row = 0; row < H; ++row)
      for (int64_t col = 0; col < cols; ++col) m.push_back(100.0 * block + 10.0 * static_cast<double>(row) + static_cast<double>(col));
  const auto s = torch_to_seed_gates(m, H, cols);
  const int torch_block_of[3] = {1, 0, 2};  // u ← z, r ← r, n ← n
  for (int g = 0; g < 3; ++g)
    for (int64_t row = 0; row < H; ++row)
      for (int64_t col = 0; col < cols; ++col)
        CHECK(s[(g * H + row) * cols + col] == 100.0 * torch_block_of[g] + 10.0 * static_cast<double>(row) + static_cast<double>(col));
  const auto b = torch_to_seed_gates({1, 2, 3, 4, 5, 6}, 2, 1);  // a [3H] vector
  CHECK(b == std::vector<double>{3, 4, 1, 2, 5, 6});
  CHECK_THROWS_WITH(torch_to_seed_gates({1, 2, 3, 4}, 2, 1), Catch::Contains("expected 3·2·1"));
}

TEST_CASE("gru calibrate: the float64 GRU by hand (C = H = 1, two steps)", "[gru]") {
  // r = σ(ln 3) = 3/4 and z = σ(−ln 3) = 1/4 from the biases: swapping the
  // blocks would swap them. b_hn = 0.5 sits inside r ⊙ (·).
  GruFloatWeights w;
  w.input_size = 1, w.hidden_size = 1;
  w.weight_ih = {0, 0, 1};  // (r, z, n)
  w.weight_hh = {0, 0, 2};
  w.bias_ih = {std::log(3.0), -std::log(3.0), 0};
  w.bias_hh = {0, 0, 0.5};
  std::vector<GruFloatStep> steps;
  std::vector<double> h_prev;  // (the step's h_prev points into the forward's own state)
  const auto h = gru_float_forward(w, {1.0, 0.0}, {0.5}, 2, 1, [&](const GruFloatStep& s) {
    steps.push_back(s);
    h_prev.push_back(s.h_prev[0]);
  });
  const double n1 = std::tanh(1 + 0.75 * (2 * 0.5 + 0.5)), h1 = 0.75 * n1 + 0.25 * 0.5;
  const double n2 = std::tanh(0 + 0.75 * (2 * h1 + 0.5)), h2 = 0.75 * n2 + 0.25 * h1;
  REQUIRE(h.size() == 2);
  CHECK(h[0] == Approx(h1).epsilon(1e-14));
  CHECK(h[1] == Approx(h2).epsilon(1e-14));
  REQUIRE(steps.size() == 2);
  // The observer names tensors as the seed does: u = z first.
  CHECK(steps[0].u_out[0] == Approx(0.25).epsilon(1e-14));
  CHECK(steps[0].r_out[0] == Approx(0.75).epsilon(1e-14));
  CHECK(steps[0].ih == std::vector<double>{-std::log(3.0), std::log(3.0), 1.0});
  CHECK(steps[0].hh == std::vector<double>{0.0, 0.0, 2 * 0.5 + 0.5});
  CHECK(steps[0].n_in[0] == Approx(1 + 0.75 * 1.5).epsilon(1e-14));
  CHECK(h_prev == std::vector<double>{0.5, h[0]});
  CHECK_THROWS_WITH(gru_float_forward(w, {1.0, 0.0, 3.0}, {}, 2, 1), Catch::Contains("x has 3 values; expected T·N·C = 2"));
}
