#include "tuner/reference/gru_quant.h"

#include "codegen/error.h"

namespace qjit::tuner {

using codegen::gru::eval_lut;
using codegen::gru::GruParams;
using codegen::gru::rshift_round;

namespace {

// One linear layer (seed step B): q = sat(rshift_round(Σ q_w·(q_in − zp_in) + rshift_round(q_b, s_b), s_out) + zp_out),
// where s_b takes the bias into the GEMM's scale 2^-(shift_w + shift_in) and
// s_out takes the GEMM's scale to the output's. Σ q_w·(q_in − zp_in) is the
// seed's integer GEMM minus its precomputed row sum times zp_in.
std::vector<int64_t> linear(const std::vector<int32_t>& weight, const codegen::gru::QWeight& wq,
                            const std::vector<int32_t>& bias, const codegen::gru::QWeight& bq, const int32_t* in,
                            const codegen::gru::QTensor& inq, int64_t width, const codegen::gru::QTensor& out) {
  const size_t rows = wq.shift.size();
  std::vector<int64_t> y(rows);
  for (size_t c = 0; c < rows; ++c) {
    int64_t gemm = 0, row_sum = 0;
    for (int64_t k = 0; k < width; ++k) {
      gemm += int64_t{weight[c * width + k]} * in[k];
      row_sum += weight[c * width + k];
    }
    const int gemm_shift = wq.shift[c] + inq.shift;
    const int64_t combined = (gemm - row_sum * inq.zp) + rshift_round(bias[c], bq.shift[c] - gemm_shift);
    y[c] = out.saturate(rshift_round(combined, gemm_shift - out.shift) + out.zp);
  }
  return y;
}

}  // namespace

GruStepTrace gru_quant_step(const GruParams& p, const GruWeights& w, const int32_t* x, const int32_t* h_prev) {
  const int64_t H = p.hidden_size;
  GruStepTrace t;
  t.ih = linear(w.W, p.W, w.bw, p.bw, x, p.x, p.input_size, p.ih);
  t.hh = linear(w.R, p.R, w.br, p.br, h_prev, p.h, H, p.hh);
  t.u.resize(H), t.r.resize(H), t.n.resize(H), t.h.resize(H);
  // (1 − u) in u_out's space: round(2^shift_u_out) + zp_u_out − q_u (one zero point: the seed's formula).
  const int64_t q_one = (int64_t{1} << p.u_out.shift) + p.u_out.zp;
  for (int64_t j = 0; j < H; ++j) {
    const int64_t ih_u = t.ih[j] - p.ih.zp, ih_r = t.ih[H + j] - p.ih.zp, ih_n = t.ih[2 * H + j] - p.ih.zp;
    const int64_t hh_u = t.hh[j] - p.hh.zp, hh_r = t.hh[H + j] - p.hh.zp, hh_n = t.hh[2 * H + j] - p.hh.zp;
    // C-1, C-2: the two addends rescaled (not saturated), the sum saturated as the LUT's input.
    const int64_t u_in = p.u_in.saturate(rshift_round(ih_u, p.ih.shift - p.u_in.shift) +
                                         rshift_round(hh_u, p.hh.shift - p.u_in.shift) + p.u_in.zp);
    const int64_t r_in = p.r_in.saturate(rshift_round(ih_r, p.ih.shift - p.r_in.shift) +
                                         rshift_round(hh_r, p.hh.shift - p.r_in.shift) + p.r_in.zp);
    t.u[j] = eval_lut(p.u_lut, u_in);
    t.r[j] = eval_lut(p.r_lut, r_in);
    // C-3: reset applies to (R_n·h + b_rn); the product goes straight to n_in's scale.
    const int64_t r_times_hh = (t.r[j] - p.r_out.zp) * hh_n;
    const int64_t n_in = p.n_in.saturate(rshift_round(ih_n, p.ih.shift - p.n_in.shift) +
                                         rshift_round(r_times_hh, p.r_out.shift + p.hh.shift - p.n_in.shift) +
                                         p.n_in.zp);
    t.n[j] = eval_lut(p.n_lut, n_in);
    // C-4: n aligned to h's scale (not saturated); both products in scale S_u·S_h; one rescale to h.
    const int64_t n_aligned = rshift_round(t.n[j] - p.n_out.zp, p.n_out.shift - p.h.shift) + p.h.zp;
    const int64_t old_part = (t.u[j] - p.u_out.zp) * (int64_t{h_prev[j]} - p.h.zp);
    const int64_t new_part = (q_one - t.u[j]) * (n_aligned - p.h.zp);
    t.h[j] = p.h.saturate(rshift_round(old_part + new_part, p.u_out.shift) + p.h.zp);
  }
  return t;
}

std::vector<int32_t> gru_quant_reference(const GruParams& p, const GruWeights& w, const std::vector<int32_t>& x,
                                         const std::vector<int32_t>& h0, int64_t T, int64_t N) {
  const int64_t C = p.input_size, H = p.hidden_size;
  if (static_cast<int64_t>(x.size()) != T * N * C || static_cast<int64_t>(h0.size()) != N * H ||
      static_cast<int64_t>(w.W.size()) != 3 * H * C || static_cast<int64_t>(w.R.size()) != 3 * H * H ||
      static_cast<int64_t>(w.bw.size()) != 3 * H || static_cast<int64_t>(w.br.size()) != 3 * H)
    throw Error("gru", "gru_quant_reference: tensor sizes do not match T, N, C, H");
  std::vector<int32_t> out(static_cast<size_t>(T * N * H));
  std::vector<int32_t> h = h0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      const GruStepTrace s = gru_quant_step(p, w, &x[(t * N + n) * C], &h[n * H]);
      for (int64_t j = 0; j < H; ++j) out[(t * N + n) * H + j] = h[n * H + j] = static_cast<int32_t>(s.h[j]);
    }
  return out;
}

}  // namespace qjit::tuner
