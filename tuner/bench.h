// `qjit bench`: the cached (tuned) kernel against the library baselines and
// the copy-bandwidth floor, all measured in this one process run.
#pragma once
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "cache/store.h"
#include "codegen/spec.h"

namespace qjit::tuner {

struct BenchRow {
  std::string name;       // "qjit (tuned)", "cublas_2gemm_swiglu"
  double median_us = 0, gbps = 0;
  double pct_of_floor = 0;
  double rel_error = 0;
  bool verified = false;
  std::string config;     // for the qjit row
  double sustained_us = 0;  // per launch, looped for seconds (time_sustained); 0 unless asked for
  bool checked = true;      // false: a baseline timed only (Baseline::checked), rel_error NaN
};

struct BenchReport {
  std::string spec_label, device;
  double copy_gbps = 0, bytes = 0, floor_us = 0;
  double sustain_s = 0;  // > 0: each row also timed over this many seconds back to back
  bool tuned = false;
  std::vector<BenchRow> rows;  // qjit first
  nlohmann::json to_json() const;
  std::string table() const;
};

// sustain_s > 0 also times each row looped for that many seconds (power-capped clocks).
BenchReport bench(const codegen::OpSpec& spec, cache::Store& store, double sustain_s = 0);

}  // namespace qjit::tuner
