// CPU reference of gru_quant: the integer forward pass of the seed
// (../shared/seeds/000_*), written for clarity. It is the definition the GPU
// plans must equal bit for bit.
//
// Layouts (row-major, values as int32 within each tensor's bit range):
//   x [T][N][C], h0 [N][H], W [3H][C], R [3H][H], bw [3H], br [3H];
//   gate rows u, r, n at [0, H), [H, 2H), [2H, 3H).
// Result: h [T][N][H], the state after each step.
#pragma once
#include <cstdint>
#include <vector>

#include "codegen/ops/gru_params.h"

namespace qjit::tuner {

struct GruWeights {
  std::vector<int32_t> W, R, bw, br;
};

// The forward pass over T steps of N sequences.
std::vector<int32_t> gru_quant_reference(const codegen::gru::GruParams& p, const GruWeights& w,
                                         const std::vector<int32_t>& x, const std::vector<int32_t>& h0, int64_t T,
                                         int64_t N);

// One step for one sequence: h_new [H] from the linear outputs' GEMM inputs.
// Exposed for tests of the gate arithmetic.
struct GruStepTrace {
  std::vector<int64_t> ih, hh;           // the saturated linear outputs [3H]
  std::vector<int64_t> u, r, n;          // gate outputs [H]
  std::vector<int64_t> h;                // the new state [H]
};
GruStepTrace gru_quant_step(const codegen::gru::GruParams& p, const GruWeights& w, const int32_t* x,
                            const int32_t* h_prev);

}  // namespace qjit::tuner
