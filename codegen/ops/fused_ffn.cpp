#include "codegen/ops/fused_ffn.h"
#include "codegen/error.h"

namespace qjit::codegen {
namespace {

// The tunables, in the order a reader meets them in the template.
struct Config {
  int warps;           // warps per block
  int rows_per_warp;   // output rows (of h) a row group computes
  int vec_bytes;       // bytes of W per vector load (16 = 8 fp16)
  int unroll;          // vectors per row in flight before the first FMA
  int split_d;         // warps that share one row group's columns

  static Config from(const nlohmann::json& j) {
    auto get = [&](const char* k) {
      if (!j.contains(k) || !j[k].is_number_integer())
        throw Error("config", std::string("fused_ffn config needs integer '") + k + "': " + j.dump());
      return j[k].get<int>();
    };
    return {get("warps"), get("rows_per_warp"), get("vec_bytes"), get("unroll"), get("split_d")};
  }
  nlohmann::json to_json() const {
    return {{"warps", warps}, {"rows_per_warp", rows_per_warp}, {"vec_bytes", vec_bytes}, {"unroll", unroll},
            {"split_d", split_d}};
  }
};

// Why a config is illegal for a spec, or "" when it is legal. The single rule
// set used by both pruning and validation.
std::string config_problem(const OpSpec& spec, const Config& c) {
  const auto t = fused_ffn_types(spec.get_str("dtype"));
  const int64_t d = spec.get_int("d"), m = spec.get_int("m");
  auto one_of = [](int v, std::initializer_list<int> set) {
    for (int s : set)
      if (v == s) return true;
    return false;
  };
  if (!one_of(c.warps, {1, 2, 4, 8, 16})) return "warps must be 1, 2, 4, 8 or 16";
  if (!one_of(c.rows_per_warp, {1, 2, 4})) return "rows_per_warp must be 1, 2 or 4";
  if (!one_of(c.vec_bytes, {2, 4, 8, 16})) return "vec_bytes must be 2, 4, 8 or 16";
  if (!one_of(c.unroll, {1, 2, 4})) return "unroll must be 1, 2 or 4";
  if (!one_of(c.split_d, {1, 2, 4, 8})) return "split_d must be 1, 2, 4 or 8";
  if (c.warps % c.split_d) return "split_d must divide warps";
  if (c.vec_bytes < t.w_bytes) return "vec_bytes is smaller than one weight element";
  const int vec_elems = c.vec_bytes / t.w_bytes;
  // Row starts are aligned to the vector only when the vector divides d.
  if (d % vec_elems) return "d=" + std::to_string(d) + " is not a multiple of the vector (" +
                            std::to_string(vec_elems) + " elements)";
  if (vec_elems * t.x_bytes > 64) return "x vector wider than 64 bytes";
  // Register budget: 2 * m * rows accumulators plus the loaded vectors.
  if (2 * m * c.rows_per_warp > 64) return "more than 64 accumulators";
  if (c.unroll * c.rows_per_warp * c.vec_bytes > 128) return "more than 128 bytes of W in flight per matrix";
  return "";
}

}  // namespace

FusedFfnTypes fused_ffn_types(const std::string& dtype) {
  if (dtype == "fp16") return {"qjit::half_t", "qjit::half_t", "qjit::half_t", 2, 2, 2};
  if (dtype == "bf16") return {"qjit::bf16_t", "qjit::bf16_t", "qjit::bf16_t", 2, 2, 2};
  if (dtype == "fp32") return {"float", "float", "float", 4, 4, 4};
  if (dtype == "mixed") return {"float", "qjit::half_t", "float", 4, 2, 4};
  throw Error("spec", "unknown fused_ffn dtype '" + dtype + "'; expected fp16|bf16|fp32|mixed");
}

std::vector<ParamDef> FusedFfnOp::params() const {
  return {
      {"d", "model dimension: columns of W1/W3, length of a row of x", nullptr, {}, 1, 1 << 20},
      {"h", "hidden dimension: rows of W1/W3, length of a row of y", nullptr, {}, 1, 1 << 20},
      {"m", "rows of x (decode batch), baked into the kernel", 1, {}, 1, 8},
      {"dtype", "fp16|bf16|fp32 for x, W and y; mixed = fp32 x/y with fp16 W", "fp16",
       {"fp16", "bf16", "fp32", "mixed"}},
  };
}

std::vector<nlohmann::json> FusedFfnOp::tunable_space(const OpSpec& spec) const {
  // Only the two widest legal vector widths: narrower ones only add loads.
  std::vector<int> vecs;
  for (int vec : {16, 8, 4, 2})
    if (vecs.size() < 2 && config_problem(spec, {4, 1, vec, 1, 1}).empty()) vecs.push_back(vec);
  std::vector<nlohmann::json> out;
  for (int warps : {2, 4, 8})
    for (int rows : {1, 2, 4})
      for (int vec : vecs)
        for (int unroll : {1, 2, 4})
          for (int split : {1, 2, 4}) {
            Config c{warps, rows, vec, unroll, split};
            if (config_problem(spec, c).empty()) out.push_back(c.to_json());
          }
  return out;
}

nlohmann::json FusedFfnOp::default_config(const OpSpec& spec) const {
  // Widest legal vector, 4 warps of one row each, two vectors in flight.
  for (int vec : {16, 8, 4, 2}) {
    Config c{4, spec.get_int("m") > 4 ? 2 : 1, vec, 2, 1};
    if (config_problem(spec, c).empty()) return c.to_json();
    c.unroll = 1;
    if (config_problem(spec, c).empty()) return c.to_json();
  }
  throw Error("config", "no legal fused_ffn config for " + spec.label());
}

void FusedFfnOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  const std::string problem = config_problem(spec, Config::from(config));
  if (!problem.empty()) throw Error("config", "fused_ffn config " + config.dump() + " is illegal for " + spec.label() +
                                                  ": " + problem);
}

std::vector<Constant> FusedFfnOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const auto t = fused_ffn_types(spec.get_str("dtype"));
  auto num = [](int64_t v) { return std::to_string(v); };
  return {
      {"using", "TX", t.x, "activation element type"},
      {"using", "TW", t.w, "weight element type (W1, W3)"},
      {"using", "TY", t.y, "output element type"},
      {"int", "kD", num(spec.get_int("d")), "model dimension: columns of W1/W3"},
      {"int", "kH", num(spec.get_int("h")), "hidden dimension: rows of W1/W3"},
      {"int", "kM", num(spec.get_int("m")), "rows of x processed per weight pass"},
      {"int", "kWarps", num(c.warps), "tunable: warps per block"},
      {"int", "kRowsPerWarp", num(c.rows_per_warp), "tunable: output rows per row group"},
      {"int", "kVecElems", num(c.vec_bytes / t.w_bytes), "tunable: weight elements per vector load"},
      {"int", "kUnroll", num(c.unroll), "tunable: vectors in flight per row"},
      {"int", "kSplitD", num(c.split_d), "tunable: warps sharing one row group"},
  };
}

LaunchGeometry FusedFfnOp::launch_geometry(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const int64_t rows_per_block = c.warps / c.split_d * c.rows_per_warp;
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>((spec.get_int("h") + rows_per_block - 1) / rows_per_block);
  g.block[0] = static_cast<unsigned>(32 * c.warps);
  return g;
}

Traffic FusedFfnOp::traffic(const OpSpec& spec) const {
  const auto t = fused_ffn_types(spec.get_str("dtype"));
  const double d = static_cast<double>(spec.get_int("d")), h = static_cast<double>(spec.get_int("h")),
               m = static_cast<double>(spec.get_int("m"));
  return {2 * h * d * t.w_bytes + m * d * t.x_bytes + m * h * t.y_bytes, 4 * m * h * d};
}

}  // namespace qjit::codegen
