// Helpers of wq_gemm's CPU tests of configs (test_wq_gemm_mma.cpp,
// test_wq_gemm_large.cpp): editing a config, counting in the space and in
// generated text.
#pragma once
#include <algorithm>
#include <string>
#include <nlohmann/json.hpp>
#include "codegen/registry.h"
#include "codegen/spec.h"
#include "tests/helpers.h"

namespace qjit::test {

// `config` with one key set to `value` (for the config-error checks).
inline nlohmann::json with_key(nlohmann::json config, const char* key, int value) {
  config[key] = value;
  return config;
}

// The register pipeline at M = 1 without the optional keys (an earlier small-M winner on an H100).
inline const nlohmann::json kPlainSmallM = {{"warps", 4}, {"split_k", 4}, {"tiles", 2}, {"mtiles", 1}, {"unroll", 3}, {"stages", 0}};
// The same row group streamed through a cp.async ring of 4 stages.
inline const nlohmann::json kRingSmallM = {{"warps", 4}, {"split_k", 4}, {"tiles", 2}, {"mtiles", 1}, {"unroll", 1}, {"stages", 4}};

// Configs of the small-M mainloop (no "family" key) in wq_gemm's space for `shape` whose `key` is `value` (absent: 0).
inline long count_in_space(const char* shape, const char* key, int value) {
  const auto space = codegen::find_op("wq_gemm").tunable_space(codegen::parse_spec("wq_gemm", shape));
  return std::count_if(space.begin(), space.end(),
                       [&](const nlohmann::json& c) { return !c.contains("family") && c.value(key, 0) == value; });
}

}  // namespace qjit::test
