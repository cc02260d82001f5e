#include "codegen/ops/fused_ffn.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/ops/fp_lut.h"
#include "codegen/ops/wq_mainloop.h"

namespace qjit::codegen {
namespace {

// The tunables. Four kernel families:
//   simt (templates/fused_ffn/fused_ffn.cu): CUDA-core FMAs, any dtype, any d;
//   mma  (templates/fused_ffn/fused_ffn_mma.cu): tensor cores, 16-bit x/W, d % 8 == 0;
//   wq   (templates/fused_ffn/fused_ffn_wq.cu): weights=native, wq_gemm's
//        mainloop on W1 and W3 at once (its config: WqConfig plus "family");
//   cublas (templates/fused_ffn/fused_ffn_cublas.cu): 16-bit dense weights,
//        two cuBLAS GEMMs then a SwiGLU kernel (CublasConfig).
bool quantized(const OpSpec& spec) { return spec.get_str("weights") == "native"; }

WqShape wq_shape(const OpSpec& spec) {
  WqShape s;
  s.k = spec.get_int("d"), s.n = spec.get_int("h"), s.m = spec.get_int("m"), s.g = spec.get_int("g");
  s.bits = static_cast<int>(spec.get_int("bits"));
  s.zero = spec.get_str("zero"), s.scales = spec.get_str("scales"), s.x = spec.get_str("dtype");
  s.matrices = 2;
  return s;
}

bool is_wq_config(const nlohmann::json& j) { return config_family(j) == "wq"; }

WqConfig wq_config(const nlohmann::json& j) {
  if (!is_wq_config(j)) throw Error("config", "fused_ffn on native weights takes \"family\": \"wq\": " + j.dump());
  return WqConfig::from(j, "fused_ffn", 1);
}

nlohmann::json wq_json(const WqConfig& c) {
  auto j = c.to_json();
  j["family"] = "wq";
  return j;
}

struct Config {
  std::string family;  // "simt" | "mma"
  int warps;           // warps per block
  int split_d;         // warps that share one row group's columns
  int unroll;          // column steps in flight before the first multiply
  int rows_per_warp;   // simt: output rows (of h) a row group computes
  int vec_bytes;       // simt: bytes of W per vector load (16 = 8 fp16)
  int tiles;           // mma: 16-row tiles a row group computes

  static Config from(const nlohmann::json& j) {
    auto get = [&](const char* k) { return config_int(j, k, "fused_ffn config"); };
    if (!j.is_object() || !j.contains("family") || !j["family"].is_string())
      throw Error("config", "fused_ffn config needs \"family\": \"simt\" or \"mma\": " + j.dump());
    Config c{j["family"].get<std::string>(), get("warps"), get("split_d"), get("unroll"), 0, 16, 0};
    if (c.family == "simt") c.rows_per_warp = get("rows_per_warp"), c.vec_bytes = get("vec_bytes");
    else if (c.family == "mma") c.tiles = get("tiles");
    else throw Error("config", "fused_ffn family '" + c.family + "' (expected simt or mma)");
    const size_t keys = c.family == "simt" ? 6 : 5;
    if (j.size() != keys) throw Error("config", "fused_ffn " + c.family + " config has unknown keys: " + j.dump());
    return c;
  }
  nlohmann::json to_json() const {
    if (family == "mma")
      return {{"family", family}, {"warps", warps}, {"split_d", split_d}, {"unroll", unroll}, {"tiles", tiles}};
    return {{"family", family}, {"warps", warps},         {"split_d", split_d},
            {"unroll", unroll}, {"rows_per_warp", rows_per_warp}, {"vec_bytes", vec_bytes}};
  }
  static Config simt(int warps, int rows, int vec, int unroll, int split) {
    return {"simt", warps, split, unroll, rows, vec, 0};
  }
  static Config mma(int warps, int tiles, int unroll, int split) { return {"mma", warps, split, unroll, 0, 16, tiles}; }
};

// The cuBLAS family ("family": "cublas"): two cuBLAS GEMMs into fp32 sums
// in the workspace, then qjit_fused_ffn_swiglu stores y (the path a user
// without qjit has, as a candidate the tuner can choose).
struct CublasConfig {
  int threads;  // threads per block of the SwiGLU kernel

  static bool is(const nlohmann::json& j) { return config_family(j) == "cublas"; }
  static CublasConfig from(const nlohmann::json& j) {
    if (j.size() != 2) throw Error("config", "fused_ffn cublas config needs family and threads: " + json_excerpt(j));
    return {config_int(j, "threads", "fused_ffn cublas config")};
  }
  nlohmann::json to_json() const { return {{"family", "cublas"}, {"threads", threads}}; }
};

std::string cublas_problem(const OpSpec& spec, const CublasConfig& c) {
  if (c.threads != 128 && c.threads != 256) return "threads must be 128 or 256";
  const std::string dtype = spec.get_str("dtype");
  // cublasGemmEx multiplies x and W of one type.
  if (dtype != "fp16" && dtype != "bf16") return "the cublas family needs fp16 or bf16 x and W, not " + dtype;
  return "";
}

// Why a config is illegal for a spec, or "" when it is legal. The single rule
// set used by both pruning and validation.
std::string config_problem(const OpSpec& spec, const Config& c) {
  if (quantized(spec)) return "fused_ffn on native weights takes the wq family";
  const auto t = fused_ffn_types(spec.get_str("dtype"));
  const int64_t d = spec.get_int("d"), m = spec.get_int("m");
  auto one_of = [](int v, std::initializer_list<int> set) {
    for (int s : set)
      if (v == s) return true;
    return false;
  };
  if (!one_of(c.warps, {1, 2, 4, 8, 16})) return "warps must be 1, 2, 4, 8 or 16";
  if (!one_of(c.unroll, {1, 2, 4})) return "unroll must be 1, 2 or 4";
  if (!one_of(c.split_d, {1, 2, 4, 8})) return "split_d must be 1, 2, 4 or 8";
  if (c.warps % c.split_d) return "split_d must divide warps";
  if (c.family == "mma") {
    if (t.x_bytes != 2 || t.w_bytes != 2) return "the mma family needs 16-bit x and W (fp16 or bf16)";
    if (d % 8) return "the mma family needs d % 8 == 0 (16-byte row loads)";
    if (!one_of(c.tiles, {1, 2})) return "tiles must be 1 or 2";
    if (c.tiles * c.unroll > 4) return "more than 4 tile-steps of W in flight";
    return "";
  }
  if (!one_of(c.rows_per_warp, {1, 2, 4})) return "rows_per_warp must be 1, 2 or 4";
  if (!one_of(c.vec_bytes, {2, 4, 8, 16})) return "vec_bytes must be 2, 4, 8 or 16";
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
      {"act", "gate activation: silu (expf), silu_lut (qjit's fitted FP16 table), silu_lut_seed (seed 003's table)",
       "silu", {"silu", "silu_lut", "silu_lut_seed"}},
      added_later({"weights",
                   "dense: W1/W3 [h, d] of dtype's weight type; native: group-quantized in qjit's native layout "
                   "(`qjit repack` converts awq/gptq), dtype then the type of x and y",
                   "dense",
                   {"dense", "native", "awq", "gptq"}}),
      only_if("weights", "native", added_later({"bits", "weights=native: bits per weight, 2, 3, 4 or 8", 4, {}, 2, 8})),
      only_if("weights", "native",
              added_later({"g", "weights=native: group size along d (32, 64, 128, or d itself)", 128, {}, 32,
                           int64_t{1} << 20})),
      only_if("weights", "native",
              added_later({"zero", "weights=native: sym, int (one zero byte per group) or float (offsets), as wq_gemm",
                           "int", {"sym", "int", "float"}})),
      only_if("weights", "native",
              added_later({"scales", "weights=native: type of scales (and offsets)", "fp16", {"fp16", "bf16"}})),
  };
}

void FusedFfnOp::validate(const nlohmann::json& p) const {
  auto s = [](int64_t v) { return std::to_string(v); };
  const int64_t d = p.at("d").get<int64_t>(), h = p.at("h").get<int64_t>(), g = p.at("g").get<int64_t>(),
                bits = p.at("bits").get<int64_t>();
  if (p.at("weights") == "dense") {
    // One spec (one cache key) per dense kernel: the quantization keys keep their defaults.
    for (const auto& [key, dflt] : {std::pair<const char*, nlohmann::json>{"bits", 4}, {"g", 128}, {"zero", "int"},
                                    {"scales", "fp16"}})
      if (p.at(key) != dflt)
        throw Error("spec", std::string("fused_ffn ") + key + "=" +
                                (p.at(key).is_string() ? p.at(key).get<std::string>() : p.at(key).dump()) +
                                " applies to weights=native only");
    return;
  }
  const std::string weights = p.at("weights").get<std::string>();
  if (weights != "native")
    throw Error("spec", "fused_ffn reads quantized W1/W3 in qjit's native layout; convert " + weights +
                            " weights once with `qjit repack --from " + weights + "` (bit-exact) and pass weights=native");
  const std::string dtype = p.at("dtype").get<std::string>();
  if (dtype == "mixed")
    throw Error("spec", "fused_ffn dtype=mixed with weights=native: dtype names x and y there; use fp32");
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    throw Error("spec", "fused_ffn bits=" + s(bits) + "; expected 2, 3, 4 or 8");
  if (h % 16) throw Error("spec", "fused_ffn h=" + s(h) + " is not a multiple of 16 (native tiles are 16 rows)");
  if (d % 64) throw Error("spec", "fused_ffn d=" + s(d) + " is not a multiple of 64 (native tiles are 64 wide)");
  if (g != d && g != 32 && g != 64 && g != 128)
    throw Error("spec", "fused_ffn g=" + s(g) + "; expected 32, 64, 128 or d=" + s(d));
  if (d % g) throw Error("spec", "fused_ffn d=" + s(d) + " is not divisible by g=" + s(g));
}

std::vector<nlohmann::json> FusedFfnOp::candidates(const OpSpec& spec, const DeviceLimits&) const {
  if (quantized(spec)) {
    std::vector<nlohmann::json> out;
    for (const auto& c : wq_tunable_space(wq_shape(spec))) out.push_back(wq_json(c));
    return out;
  }
  // simt: only the two widest legal vector widths (narrower ones only add loads).
  std::vector<int> vecs;
  for (int vec : {16, 8, 4, 2})
    if (vecs.size() < 2 && config_problem(spec, Config::simt(4, 1, vec, 1, 1)).empty()) vecs.push_back(vec);
  std::vector<nlohmann::json> out;
  for (int threads : {128, 256})
    if (cublas_problem(spec, {threads}).empty()) out.push_back(CublasConfig{threads}.to_json());
  for (int warps : {2, 4, 8})
    for (int split : {1, 2, 4})
      for (int unroll : {1, 2, 4}) {
        for (int rows : {1, 2, 4})
          for (int vec : vecs) {
            Config c = Config::simt(warps, rows, vec, unroll, split);
            if (config_problem(spec, c).empty()) out.push_back(c.to_json());
          }
        for (int tiles : {1, 2}) {
          Config c = Config::mma(warps, tiles, unroll, split);
          if (config_problem(spec, c).empty()) out.push_back(c.to_json());
        }
      }
  return out;
}

nlohmann::json FusedFfnOp::default_config(const OpSpec& spec) const {
  if (quantized(spec)) return wq_json(wq_default_config(wq_shape(spec)));
  // Several rows of x: tensor cores where the types allow. Otherwise the
  // widest legal vector, 4 warps of one row each, two vectors in flight.
  if (spec.get_int("m") > 2) {
    Config c = Config::mma(4, 1, 2, 1);
    if (config_problem(spec, c).empty()) return c.to_json();
  }
  for (int vec : {16, 8, 4, 2}) {
    Config c = Config::simt(4, spec.get_int("m") > 4 ? 2 : 1, vec, 2, 1);
    if (config_problem(spec, c).empty()) return c.to_json();
    c.unroll = 1;
    if (config_problem(spec, c).empty()) return c.to_json();
  }
  throw Error("config", "no legal fused_ffn config for " + spec.label());
}

std::string FusedFfnOp::template_path(const nlohmann::json& config) const {
  if (is_wq_config(config)) return "templates/fused_ffn/fused_ffn_wq.cu";
  if (CublasConfig::is(config)) return "templates/fused_ffn/fused_ffn_cublas.cu";
  return Config::from(config).family == "mma" ? "templates/fused_ffn/fused_ffn_mma.cu"
                                              : "templates/fused_ffn/fused_ffn.cu";
}

void FusedFfnOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  const std::string problem = quantized(spec)            ? wq_config_problem(wq_shape(spec), wq_config(config))
                              : CublasConfig::is(config) ? cublas_problem(spec, CublasConfig::from(config))
                                                         : config_problem(spec, Config::from(config));
  if (!problem.empty()) throw Error("config", "fused_ffn config " + config.dump() + " is illegal for " + spec.label() +
                                                  ": " + problem);
}

// The gate activation: Act::apply(z), and the table it reads.
static void add_activation(const OpSpec& spec, std::vector<Constant>& out) {
  const std::string act = spec.get_str("act");
  if (act == "silu") {
    out.push_back({"using", "Act", "qjit::SiluExpf", "gate activation: z / (1 + expf(-z))"});
  } else {
    out.push_back(lut_struct(lut::build("silu", act == "silu_lut_seed" ? lut::seed_silu_cuts() : lut::default_cuts("silu"))));
    out.push_back({"using", "Act", "qjit::LutActivation<Lut>", "gate activation: the FP16 SiLU table"});
  }
}

std::vector<Constant> FusedFfnOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  if (quantized(spec)) {
    auto out = wq_constants(wq_shape(spec), wq_config(config));
    add_activation(spec, out);
    return out;
  }
  const auto t = fused_ffn_types(spec.get_str("dtype"));
  auto num = [](int64_t v) { return std::to_string(v); };
  if (CublasConfig::is(config)) {
    std::vector<Constant> out = {
        {"using", "TY", t.y, "output element type"},
        {"int", "kH", num(spec.get_int("h")), "hidden dimension: columns of the sums, of y"},
        {"int", "kM", num(spec.get_int("m")), "rows of x, of y"},
        {"int", "kThreads", num(CublasConfig::from(config).threads), "tunable: threads per block"},
    };
    add_activation(spec, out);
    return out;
  }
  const Config c = Config::from(config);
  std::vector<Constant> out = {
      {"using", "TX", t.x, "activation element type"},
      {"using", "TW", t.w, "weight element type (W1, W3)"},
      {"using", "TY", t.y, "output element type"},
      {"int", "kD", num(spec.get_int("d")), "model dimension: columns of W1/W3"},
      {"int", "kH", num(spec.get_int("h")), "hidden dimension: rows of W1/W3"},
      {"int", "kM", num(spec.get_int("m")), "rows of x processed per weight pass"},
      {"int", "kWarps", num(c.warps), "tunable: warps per block"},
      {"int", "kSplitD", num(c.split_d), "tunable: warps sharing one row group"},
      {"int", "kUnroll", num(c.unroll), "tunable: column steps in flight"},
  };
  add_activation(spec, out);
  if (c.family == "mma") {
    out.push_back({"int", "kTiles", num(c.tiles), "tunable: 16-row tensor-core tiles per row group"});
  } else {
    out.push_back({"int", "kRowsPerWarp", num(c.rows_per_warp), "tunable: output rows per row group"});
    out.push_back({"int", "kVecElems", num(c.vec_bytes / t.w_bytes), "tunable: weight elements per vector load"});
  }
  return out;
}

// The cublas family: h1 = x·W1ᵀ and h3 = x·W3ᵀ by cuBLAS into fp32 sums in
// the workspace, then y = act(h1) ⊙ h3 by qjit_fused_ffn_swiglu.
static Plan cublas_plan(const OpSpec& spec, const CublasConfig& c) {
  const int64_t d = spec.get_int("d"), h = spec.get_int("h"), m = spec.get_int("m");
  const size_t sums_bytes = static_cast<size_t>(m * h) * 4;
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>((m * h + c.threads - 1) / c.threads);
  g.block[0] = static_cast<unsigned>(c.threads);
  // cuBLAS takes x, W1, W3 and y at any element boundary.
  Plan p = single_kernel_plan("qjit_fused_ffn_swiglu", g, {workspace_param(0), arg_param("y")},
                              {{"x", 2}, {"w1", 2}, {"w3", 2}, {"y", 2}});
  CublasGemm gemm;
  gemm.x = "x", gemm.fixed_rows = m, gemm.k = d, gemm.n = h;
  gemm.bf16 = spec.get_str("dtype") == "bf16";
  gemm.to_sums = true;
  CublasGemm up = gemm;
  gemm.w = "w1", gemm.sums_offset = 0;
  up.w = "w3", up.sums_offset = sums_bytes;
  p.steps.insert(p.steps.begin(), {{PlanStep::Kind::cublas_gemm, -1, gemm}, {PlanStep::Kind::cublas_gemm, -1, up}});
  p.workspace_fixed = 2 * sums_bytes;
  return p;
}

// Dense weights take w1 and w3 (the scales and zeros are unused); native
// ones take each matrix as packed words, scales and zeros (wq_gemm's).
std::vector<ArgDef> FusedFfnOp::args() const {
  return {{"x"}, {"w1"}, {"scales1"}, {"zeros1"}, {"w3"}, {"scales3"}, {"zeros3"}, {"y"}};
}

Plan FusedFfnOp::plan(const OpSpec& spec, const nlohmann::json& config) const {
  if (quantized(spec)) {
    const WqShape s = wq_shape(spec);
    const WqAlign a = wq_alignment(s, wq_config(config));
    const bool sym = s.zero == "sym";
    return single_kernel_plan(
        "qjit_fused_ffn", wq_launch(s, wq_config(config)).geometry,
        arg_params({"x", "w1", "scales1", "zeros1", "w3", "scales3", "zeros3", "y"}),
        {{"x", 16}, {"w1", a.qweight}, {"scales1", a.scales}, {"zeros1", a.zeros, sym}, {"w3", a.qweight},
         {"scales3", a.scales}, {"zeros3", a.zeros, sym}, {"y", s.x == "fp32" ? 4 : 2}});
  }
  if (CublasConfig::is(config)) return cublas_plan(spec, CublasConfig::from(config));
  const Config c = Config::from(config);
  const int64_t rows_per_block = c.warps / c.split_d * (c.family == "mma" ? 16 * c.tiles : c.rows_per_warp);
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>((spec.get_int("h") + rows_per_block - 1) / rows_per_block);
  g.block[0] = static_cast<unsigned>(32 * c.warps);
  const auto t = fused_ffn_types(spec.get_str("dtype"));
  // W is read in vec_bytes vectors (16 in the mma family); x in the same number of elements.
  const int w_align = c.family == "mma" ? 16 : c.vec_bytes;
  const int x_align = std::min(16, w_align / t.w_bytes * t.x_bytes);
  return single_kernel_plan("qjit_fused_ffn", g, arg_params({"x", "w1", "w3", "y"}),
                            {{"x", x_align}, {"w1", w_align}, {"w3", w_align}, {"y", t.y_bytes}});
}

Traffic FusedFfnOp::traffic(const OpSpec& spec) const {
  if (quantized(spec)) {
    const WqShape s = wq_shape(spec);
    const double xb = s.x == "fp32" ? 4 : 2, d = static_cast<double>(s.k), h = static_cast<double>(s.n),
                 m = static_cast<double>(s.m);
    return {2 * wq_weight_bytes(s) + m * d * xb + m * h * xb, 4 * m * h * d};
  }
  const auto t = fused_ffn_types(spec.get_str("dtype"));
  const double d = static_cast<double>(spec.get_int("d")), h = static_cast<double>(spec.get_int("h")),
               m = static_cast<double>(spec.get_int("m"));
  return {2 * h * d * t.w_bytes + m * d * t.x_bytes + m * h * t.y_bytes, 4 * m * h * d};
}

const OpDef& fused_ffn_op() {
  static const FusedFfnOp op;
  return op;
}

}  // namespace qjit::codegen
