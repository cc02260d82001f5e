#include "codegen/ops/wq_gemm.h"
#include "codegen/error.h"
#include "codegen/ops/wq_dense.h"
#include "codegen/ops/wq_mainloop.h"
#include "codegen/ops/wq_tiled.h"
#include "codegen/ops/wq_wgmma.h"

namespace qjit::codegen {
namespace {

int bytes_of(const std::string& t) { return t == "fp32" ? 4 : 2; }

WqShape shape_of(const OpSpec& spec) {
  WqShape s;
  s.k = spec.get_int("k"), s.n = spec.get_int("n"), s.m = spec.get_int("m"), s.g = spec.get_int("g");
  s.bits = static_cast<int>(spec.get_int("bits"));
  s.zero = spec.get_str("zero"), s.scales = spec.get_str("scales"), s.x = spec.get_str("x");
  s.residual = spec.get_str("residual") == "yes";
  return s;
}

// One kernel family: how its configs are told apart, its template, its
// legality, search space and constants, and the plan of one call. The
// small-M mainloop's configs have no "family" key (the cache holds such
// configs); the others name theirs.
struct Family {
  const char* name;  // the config's "family", "" for the small-M mainloop
  const char* template_path;
  bool sm90a;  // wgmma: compiled for sm_90a, tuned on compute capability 9.0 only
  std::string (*problem)(const WqShape&, const nlohmann::json&);
  std::vector<nlohmann::json> (*space)(const WqShape&, const DeviceLimits&);
  std::vector<Constant> (*constants)(const WqShape&, const nlohmann::json&);
  // The kernel's launch; null for the cublas family, whose plan is wq_dense_plan.
  WqLaunch (*launch)(const WqShape&, const nlohmann::json&);
};

template <typename C>
std::vector<nlohmann::json> to_json(const std::vector<C>& v) {
  std::vector<nlohmann::json> out;
  for (const auto& c : v) out.push_back(c.to_json());
  return out;
}

// In the order of the search: dequantise + cuBLAS first, so that a tune cut
// short by --budget still measures the path a user has without qjit and its
// winner is never slower than it.
const Family kFamilies[] = {
    {"cublas", "templates/wq_gemm/wq_gemm_dense.cu", false,
     [](const WqShape& s, const nlohmann::json& j) { return wq_dense_problem(s, WqDenseConfig::from(j)); },
     [](const WqShape& s, const DeviceLimits&) { return to_json(wq_dense_space(s)); },
     [](const WqShape& s, const nlohmann::json& j) { return wq_dense_constants(s, WqDenseConfig::from(j)); },
     nullptr},
    {"", "templates/wq_gemm/wq_gemm_mma.cu", false,
     [](const WqShape& s, const nlohmann::json& j) { return wq_config_problem(s, WqConfig::from(j, "wq_gemm")); },
     [](const WqShape& s, const DeviceLimits&) { return to_json(wq_tunable_space(s)); },
     [](const WqShape& s, const nlohmann::json& j) { return wq_constants(s, WqConfig::from(j, "wq_gemm")); },
     [](const WqShape& s, const nlohmann::json& j) { return wq_launch(s, WqConfig::from(j, "wq_gemm")); }},
    {"tiled", "templates/wq_gemm/wq_gemm_tiled.cu", false,
     [](const WqShape& s, const nlohmann::json& j) { return wq_tiled_problem(s, WqTiledConfig::from(j)); },
     [](const WqShape& s, const DeviceLimits&) { return to_json(wq_tiled_space(s)); },
     [](const WqShape& s, const nlohmann::json& j) { return wq_tiled_constants(s, WqTiledConfig::from(j)); },
     [](const WqShape& s, const nlohmann::json& j) { return wq_tiled_launch(s, WqTiledConfig::from(j)); }},
    {"wgmma", "templates/wq_gemm/wq_gemm_wgmma.cu", true,
     [](const WqShape& s, const nlohmann::json& j) { return wq_wgmma_problem(s, WqWgmmaConfig::from(j)); },
     [](const WqShape& s, const DeviceLimits& d) { return to_json(wq_wgmma_space(s, d)); },
     [](const WqShape& s, const nlohmann::json& j) { return wq_wgmma_constants(s, WqWgmmaConfig::from(j)); },
     [](const WqShape& s, const nlohmann::json& j) { return wq_wgmma_launch(s, WqWgmmaConfig::from(j)); }},
};

const Family& family_of(const nlohmann::json& config) {
  const std::string name = config.is_object() && config.contains("family") && config["family"].is_string()
                               ? config["family"].get<std::string>()
                               : "";
  for (const auto& f : kFamilies)
    if (name == f.name) return f;
  throw Error("config", "wq_gemm config " + config.dump() + ": unknown family '" + name +
                            "' (expected cublas, tiled, wgmma, or none for the small-M mainloop)");
}

bool tiled(const nlohmann::json& j) { return WqTiledConfig::is_tiled(j); }
bool wgmma(const nlohmann::json& j) { return WqWgmmaConfig::is_wgmma(j); }

}  // namespace

int wq_gemm_bucket(int64_t m) { return pow2_bucket(m, 1024); }

// The buckets from lo's to hi's: `--m 1-8` is 1, 2, 4, 8 and `--m 1-1024` all eleven.
std::vector<int64_t> WqGemmOp::m_values_for_rows(int64_t lo, int64_t hi) const {
  return pow2_buckets(lo, hi, 1024);
}

std::vector<ParamDef> WqGemmOp::params() const {
  return {
      {"k", "input features (multiple of 64 and of g)", nullptr, {}, 64, int64_t{1} << 20},
      {"n", "output features (multiple of 16)", nullptr, {}, 16, int64_t{1} << 20},
      {"m", "bucket of rows of x: 1, 2, 4, ..., 1024 (a launch has M <= m; 1024 serves any M)", 1, {}, 1, 1024},
      {"bits", "weight bits: 2, 3, 4 or 8", 4, {}, 2, 8},
      {"g", "group size along k (32, 64, 128, or k itself)", 128, {}, 32, int64_t{1} << 20},
      {"layout", "native (qjit's; `qjit repack` converts awq/gptq to it)", "native", {"native", "awq", "gptq"}},
      {"zero", "sym: (q-2^(b-1))*s; int: (q-z)*s, z one byte; float: (q-2^(b-1))*s+o", "int", {"sym", "int", "float"}},
      {"scales", "type of scales (and offsets); the tensor cores multiply in it", "fp16", {"fp16", "bf16"}},
      {"x", "type of x, bias and y", "fp16", {"fp16", "bf16", "fp32"}},
      {"bias", "add bias[n] before the clamp", "no", {"no", "yes"}},
      {"act", "clamp after the bias: none, relu [0, inf), relu6 [0, 6]", "none", {"none", "relu", "relu6"}},
      added_later({"residual", "add residual[m][n] (same type as y; may be y itself) after the clamp", "no", {"no", "yes"}}),
  };
}

void WqGemmOp::validate(const nlohmann::json& p) const {
  const int64_t k = p.at("k").get<int64_t>(), n = p.at("n").get<int64_t>(), g = p.at("g").get<int64_t>(),
                m = p.at("m").get<int64_t>(), bits = p.at("bits").get<int64_t>();
  auto s = [](int64_t v) { return std::to_string(v); };
  if (m & (m - 1)) throw Error("spec", "wq_gemm m=" + s(m) + " is not a bucket; expected 1, 2, 4, ..., 1024");
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    throw Error("spec", "wq_gemm bits=" + s(bits) + "; expected 2, 3, 4 or 8");
  if (p.at("layout") != "native" && bits != 4)
    throw Error("spec", "wq_gemm layout=" + p.at("layout").get<std::string>() + " holds 4-bit weights only, not bits=" +
                            s(bits) + " (the native layout takes 2, 3, 4 or 8)");
  if (p.at("layout") != "native")
    throw Error("spec", "wq_gemm runs on the native layout; convert " + p.at("layout").get<std::string>() +
                            " weights once with `qjit repack --from " + p.at("layout").get<std::string>() + "`");
  if (n % 16) throw Error("spec", "wq_gemm n=" + s(n) + " is not a multiple of 16 (native tiles are 16 rows of n)");
  if (k % 64) throw Error("spec", "wq_gemm k=" + s(k) + " is not a multiple of 64 (native tiles are 64 wide in k)");
  if (g != k && g != 32 && g != 64 && g != 128)
    throw Error("spec", "wq_gemm g=" + s(g) + "; expected 32, 64, 128 or k=" + s(k));
  if (k % g) throw Error("spec", "wq_gemm k=" + s(k) + " is not divisible by g=" + s(g));
}

std::vector<ArgDef> WqGemmOp::args() const {
  return {{"x"}, {"qweight"}, {"scales"}, {"zeros"}, {"bias"}, {"residual"}, {"y"}, {"m", ArgDef::Kind::int32}};
}

std::string WqGemmOp::template_path(const nlohmann::json& config) const { return family_of(config).template_path; }

bool WqGemmOp::needs_sm90a(const nlohmann::json& config) const { return family_of(config).sm90a; }

std::vector<nlohmann::json> WqGemmOp::candidates(const OpSpec& spec, const DeviceLimits& device) const {
  std::vector<nlohmann::json> out;
  for (const auto& f : kFamilies)
    for (auto& c : f.space(shape_of(spec), device)) out.push_back(std::move(c));
  return out;
}

nlohmann::json WqGemmOp::default_config(const OpSpec& spec) const {
  const WqShape s = shape_of(spec);
  if (const auto tiled_default = wq_tiled_default(s)) return tiled_default->to_json();
  return wq_default_config(s).to_json();
}

void WqGemmOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  const std::string p = family_of(config).problem(shape_of(spec), config);
  if (!p.empty()) throw Error("config", "wq_gemm config " + config.dump() + " is illegal for " + spec.label() + ": " + p);
}

std::vector<Constant> WqGemmOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  auto out = family_of(config).constants(shape_of(spec), config);
  const std::string act = spec.get_str("act");
  out.push_back({"bool", "kHasBias", spec.get_str("bias") == "yes" ? "true" : "false", "add bias[n]"});
  out.push_back({"int", "kAct", act == "none" ? "0" : act == "relu" ? "1" : "2", "0 none, 1 relu, 2 relu6"});
  out.push_back({"bool", "kHasResidual", spec.get_str("residual") == "yes" ? "true" : "false",
                 "add residual[m][n] after the clamp"});
  return out;
}

Plan WqGemmOp::plan(const OpSpec& spec, const nlohmann::json& config) const {
  const WqShape s = shape_of(spec);
  const Family& f = family_of(config);
  const bool sym = s.zero == "sym", no_bias = spec.get_str("bias") == "no", no_residual = !s.residual;
  if (!f.launch) {
    // Vector loads of the native words (wq_dequant.cuh's load_tile); cuBLAS
    // takes x and y at any element boundary.
    const int words = s.bits % 4 == 0 ? 4 : s.bits == 2 ? 2 : 1;
    return wq_dense_plan(s, WqDenseConfig::from(config), !no_bias, spec.get_str("act"),
                         {{"x", 2},
                          {"qweight", 4 * words},
                          {"scales", 2},
                          {"zeros", s.zero == "float" ? 2 : 1, sym},
                          {"bias", 2, no_bias},
                          {"residual", 2, no_residual},
                          {"y", 2}});
  }
  // The large-M kernels copy weights, scales and zeros in 16-byte pieces.
  const WqAlign a = tiled(config) || wgmma(config) ? WqAlign{16, 16, 16} : wq_alignment(s, WqConfig::from(config, "wq_gemm"));
  const int xb = bytes_of(s.x);
  // y through shared memory (wgmma stage_y) stores y's rows 16 bytes at a time.
  const int yb = wgmma(config) && WqWgmmaConfig::from(config).stage_y ? 16 : xb;
  WqLaunch l = f.launch(s, config);
  // Every wq_gemm kernel takes x, qweight, scales, zeros, bias, residual, y
  // and m; all but the tiled one then a workspace (null unless the config
  // uses one) and the wgmma kernel its tensor maps.
  auto params = arg_params({"x", "qweight", "scales", "zeros", "bias", "residual", "y", "m"});
  if (!tiled(config)) params.push_back(workspace_param(0));
  Plan p = single_kernel_plan("qjit_wq_gemm", l.geometry, std::move(params),
                              {{"x", 16},
                               {"qweight", a.qweight},
                               {"scales", a.scales},
                               {"zeros", a.zeros, sym},
                               {"bias", xb, no_bias},
                               {"residual", xb, no_residual},
                               {"y", yb}});
  p.kernels[0].tensor_maps = std::move(l.tensor_maps);
  p.workspace_fixed = l.workspace_fixed;
  return p;
}

Traffic WqGemmOp::traffic(const OpSpec& spec) const {
  const WqShape s = shape_of(spec);
  const double n = static_cast<double>(s.n), m = static_cast<double>(s.m), k = static_cast<double>(s.k);
  const double xb = bytes_of(s.x);
  const double bias = spec.get_str("bias") == "yes" ? n * xb : 0;
  const double residual = spec.get_str("residual") == "yes" ? m * n * xb : 0;
  return {wq_weight_bytes(s) + m * k * xb + m * n * xb + bias + residual, 2 * m * n * k};
}

const OpDef& wq_gemm_op() {
  static const WqGemmOp op;
  return op;
}

}  // namespace qjit::codegen
