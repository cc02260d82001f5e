// LUT quality tools for `qjit lut report` and `qjit lut fit`: the error of a
// table against its float64 function over every finite fp16 input, and a
// search for cut points that minimise the maximum error.
//
// Error definitions (f in float64, clamped to ±65504 like the table's output):
//   abs = |y - f(x)|,  rel = |y - f(x)| / max(|f(x)|, 2^-14)
// (2^-14, the smallest normal fp16, keeps rel finite near the zeros of f).
// max_abs over all inputs is, for functions with a linear tail (silu, gelu,
// softplus), set by fp32 rounding near |x| = 32768 and moves only with c9;
// so `fit` compares candidates lexicographically: first the metric over all
// inputs (max_abs or max_rel), then max_abs_small, the max abs error over the
// inputs with |f(x)| <= 1, where the shape of the table decides the error.
#pragma once
#include <array>
#include <functional>
#include <string>
#include <vector>
#include "codegen/ops/fp_lut_table.h"

namespace qjit::tuner {

struct LutError {
  double max_abs = 0, max_rel = 0, max_abs_small = 0;
  float worst_abs_x = 0, worst_rel_x = 0, worst_abs_small_x = 0;  // the inputs where the maxima occur
  int inputs = 0;                          // finite fp16 inputs measured
};

LutError lut_error(const codegen::lut::Table& t);
double lut_objective(const LutError& e, const std::string& metric);  // "abs" (max_abs) | "rel" (max_rel)
// True when a is a better fit than b under `metric` (the lexicographic order above).
bool lut_better(const LutError& a, const LutError& b, const std::string& metric);

struct FitOptions {
  std::string metric = "abs";
  double seconds = 20;  // time budget
  std::function<void(int sweep, double best, double best_small)> progress;
};
// Coordinate search over c1..c9 on the fp16 grid (c0, c10 fixed), starting
// from `start`: per sweep a coarse scan of each cut between its neighbours (1024 points),
// then moves of 1024..1 fp16 steps; only improvements are accepted, so the
// result is never worse than the start; the abs error where |f| <= 1 never
// grows, and the other metric (rel for an abs fit, abs for a rel fit) may
// not grow past 1.25x its starting value.
codegen::lut::Table fit_cuts(const std::string& fn, const std::array<float, 11>& start, const FitOptions& opt);

// Error curves as a PNG: x across [x_lo, x_hi], abs error of each table.
void write_error_png(const std::string& path, const std::vector<codegen::lut::Table>& tables, float x_lo, float x_hi,
                     int width = 1000, int height = 400);

}  // namespace qjit::tuner
