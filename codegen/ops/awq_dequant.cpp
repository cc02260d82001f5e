#include "codegen/ops/awq_dequant.h"
#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen {
namespace {

struct Config {
  int threads;  // threads per block
  int items;    // packed units per thread, all loaded before any is stored
                // (awq: one int32 word = 8 columns; gptq: 8x8 block)
  bool stream_stores;  // st.global.cs (evict-first) or the default write-back stores

  static Config from(const nlohmann::json& j) {
    auto get = [&](const char* k) { return config_int(j, k, "awq_dequant config"); };
    if (!j.is_object() || j.size() != 3 || !j.contains("stream_stores") || !j["stream_stores"].is_boolean())
      throw Error("config", "awq_dequant config needs threads, items and stream_stores: " + j.dump());
    return {get("threads"), get("items"), j["stream_stores"].get<bool>()};
  }
  nlohmann::json to_json() const { return {{"threads", threads}, {"items", items}, {"stream_stores", stream_stores}}; }
};

std::string config_problem(const Config& c) {
  if (c.threads != 64 && c.threads != 128 && c.threads != 256 && c.threads != 512)
    return "threads must be 64, 128, 256 or 512";
  if (c.items != 1 && c.items != 2 && c.items != 4) return "items must be 1, 2 or 4";
  return "";
}

// Packed units: awq = K * N/8 words; gptq = K/8 * N/8 blocks of 8x8 weights.
int64_t units(const OpSpec& spec) {
  const int64_t k = spec.get_int("k"), n = spec.get_int("n");
  return spec.get_str("layout") == "awq" ? k * (n / 8) : (k / 8) * (n / 8);
}

}  // namespace

std::vector<ParamDef> AwqDequantOp::params() const {
  return {
      {"k", "input features: rows of the dense result", nullptr, {}, 8, int64_t{1} << 20},
      {"n", "output features: columns of the dense result (multiple of 8)", nullptr, {}, 8, int64_t{1} << 20},
      {"g", "group size along k (32, 64, 128, or k itself)", 128, {}, 8, int64_t{1} << 20},
      {"layout", "awq: qweight int32 [K, N/8] interleaved; gptq: qweight int32 [K/8, N]", "awq", {"awq", "gptq"}},
      {"zero", "int: packed int4 zero points; sym: zero = 8 (gptq only)", "int", {"int", "sym"}},
      {"scales", "type of the scales (and, with out=scales, of the result)", "fp16", {"fp16", "bf16"}},
      added_later({"out", "type of the result: scales (the scales' type), fp16 or bf16", "scales",
                   {"scales", "fp16", "bf16"}}),
  };
}

void AwqDequantOp::validate(const nlohmann::json& p) const {
  const int64_t k = p.at("k").get<int64_t>(), n = p.at("n").get<int64_t>(), g = p.at("g").get<int64_t>();
  if (n % 8) throw Error("spec", "awq_dequant n=" + std::to_string(n) + " is not a multiple of 8 (8 nibbles per int32)");
  if (g != k && g != 32 && g != 64 && g != 128)
    throw Error("spec", "awq_dequant g=" + std::to_string(g) + "; expected 32, 64, 128 or k=" + std::to_string(k));
  if (k % g) throw Error("spec", "awq_dequant k=" + std::to_string(k) + " is not divisible by g=" + std::to_string(g));
  if (p.at("layout") == "gptq" && k % 8)
    throw Error("spec", "gptq packs k along int32 words: k=" + std::to_string(k) + " is not a multiple of 8");
  if (p.at("layout") == "awq" && p.at("zero") == "sym")
    throw Error("spec", "zero=sym exists for the gptq layout only (awq always carries qzeros)");
}

std::vector<nlohmann::json> AwqDequantOp::candidates(const OpSpec&, const DeviceLimits&) const {
  std::vector<nlohmann::json> out;
  for (int threads : {64, 128, 256, 512})
    for (int items : {1, 2, 4})
      for (bool stream : {true, false}) out.push_back(Config{threads, items, stream}.to_json());
  return out;
}

nlohmann::json AwqDequantOp::default_config(const OpSpec&) const { return Config{128, 1, true}.to_json(); }

void AwqDequantOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  const std::string p = config_problem(Config::from(config));
  if (!p.empty()) throw Error("config", "awq_dequant config " + config.dump() + " is illegal for " + spec.label() + ": " + p);
}

std::vector<Constant> AwqDequantOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const std::string t = spec.get_str("scales") == "bf16" ? "qjit::bf16_t" : "qjit::half_t";
  const std::string out = spec.get_str("out");
  const std::string to = out == "scales" ? t : out == "bf16" ? "qjit::bf16_t" : "qjit::half_t";
  auto num = [](int64_t v) { return std::to_string(v); };
  return {
      {"using", "TS", t, "scale type"},
      {"using", "TO", to, "result type"},
      {"int", "kK", num(spec.get_int("k")), "rows of the dense result (input features)"},
      {"int", "kN", num(spec.get_int("n")), "columns of the dense result (output features)"},
      {"int", "kGroup", num(spec.get_int("g")), "rows of k sharing one scale / zero"},
      {"bool", "kAwqLayout", spec.get_str("layout") == "awq" ? "true" : "false", "awq (else gptq) packing"},
      {"bool", "kSymmetric", spec.get_str("zero") == "sym" ? "true" : "false", "zero point 8 instead of qzeros"},
      {"long long", "kUnits", num(units(spec)), "packed units: awq words, or gptq 8x8 blocks"},
      {"int", "kThreads", num(c.threads), "tunable: threads per block"},
      {"int", "kItems", num(c.items), "tunable: packed units per thread"},
      {"bool", "kStreamStores", c.stream_stores ? "true" : "false", "tunable: evict-first stores"},
  };
}

std::vector<ArgDef> AwqDequantOp::args() const { return {{"qweight"}, {"qzeros"}, {"scales"}, {"out"}}; }

Plan AwqDequantOp::plan(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const int64_t per_block = int64_t{c.threads} * c.items;
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>((units(spec) + per_block - 1) / per_block);
  g.block[0] = static_cast<unsigned>(c.threads);
  g.programmatic = true;  // stores after qjit::wait_for_previous_grid()
  // awq reads one int32 per unit; gptq 8 consecutive int32 (32 bytes).
  const int q_align = spec.get_str("layout") == "awq" ? 4 : 16;
  // Symmetric gptq reads no zeros: qzeros may be null.
  return single_kernel_plan("qjit_awq_dequant", g, arg_params({"qweight", "qzeros", "scales", "out"}),
                            {{"qweight", q_align}, {"qzeros", 4, spec.get_str("zero") == "sym"}, {"scales", 16},
                             {"out", 16}});
}

Traffic AwqDequantOp::traffic(const OpSpec& spec) const {
  const double k = static_cast<double>(spec.get_int("k")), n = static_cast<double>(spec.get_int("n")),
               g = static_cast<double>(spec.get_int("g"));
  const double zeros = spec.get_str("zero") == "sym" ? 0 : (k / g) * n / 2;
  return {k * n / 2 + zeros + (k / g) * n * 2 + k * n * 2, 0};
}

const OpDef& awq_dequant_op() {
  static const AwqDequantOp op;
  return op;
}

}  // namespace qjit::codegen
