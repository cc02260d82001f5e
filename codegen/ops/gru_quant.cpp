#include "codegen/ops/gru_quant.h"

#include <sstream>

#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen {
namespace {

// The step plan's one tunable (more plans come with their own families).
struct Config {
  int threads;  // threads per block of both kernels

  static Config from(const nlohmann::json& j) {
    if (config_family(j) != "step" || j.size() != 2)
      throw Error("config", "gru_quant config needs \"family\": \"step\" and threads: " + json_excerpt(j));
    return {config_int(j, "threads", "gru_quant config")};
  }
  nlohmann::json to_json() const { return {{"family", "step"}, {"threads", threads}}; }
};

std::string config_problem(const Config& c) {
  return c.threads == 32 || c.threads == 64 || c.threads == 128 || c.threads == 256 ? ""
                                                                                      : "threads must be 32, 64, 128 or 256";
}

// `struct name { static constexpr T kA[N] = {...}; ... }` from named arrays.
Constant array_struct(const std::string& name, const std::vector<std::pair<std::string, std::vector<int64_t>>>& arrays,
                      const std::string& comment) {
  std::ostringstream s;
  for (const auto& [member, values] : arrays) {
    s << "  static constexpr long long " << member << "[" << values.size() << "] = {";
    for (size_t i = 0; i < values.size(); ++i) s << (i % 16 == 0 ? "\n      " : " ") << values[i] << (i + 1 < values.size() ? "," : "");
    s << "};\n";
  }
  return {"struct", name, s.str(), comment};
}

// A LUT as a struct: its segments and the ranges of its input and output.
Constant lut_struct(const std::string& name, const gru::Lut& l) {
  std::vector<int64_t> thr, qb, n, tc;
  for (const auto& s : l.segments) thr.push_back(s.threshold), qb.push_back(s.q_b), n.push_back(s.n), tc.push_back(s.term_c);
  Constant c = array_struct(name, {{"kThreshold", thr}, {"kQb", qb}, {"kShift", n}, {"kTermC", tc}},
                            l.fn + ": y = rshift_round(kQb[i]·(q − kInZp), kShift[i]) + kTermC[i], segment i the first "
                                   "with q < kThreshold[i] (else the last)");
  std::ostringstream s;
  s << "  static constexpr int kCount = " << l.segments.size() << ";\n"
    << "  static constexpr long long kInLo = " << l.in.lo() << ", kInHi = " << l.in.hi() << ", kInZp = " << l.in.zp
    << ";\n  static constexpr long long kOutLo = " << l.out.lo() << ", kOutHi = " << l.out.hi() << ";\n";
  c.value = s.str() + c.value;
  return c;
}

}  // namespace

namespace gru {

std::string canonical_params(const nlohmann::json& document) { return GruParams::from_json(document).to_json().dump(); }

GruParams params_of(const OpSpec& spec) {
  return GruParams::from_json(parse_json_input(spec.get_str("params"), "gru_quant params", "spec"));
}

}  // namespace gru

std::vector<ParamDef> GruQuantOp::params() const {
  ParamDef params{"params", "the layer's quantization document, canonical (codegen::gru::canonical_params)", nullptr, {}};
  params.free_string = true;
  return {
      {"t", "time steps", nullptr, {}, 1, int64_t{1} << 20},
      {"n", "sequences (batch)", nullptr, {}, 1, 65535},
      {"c", "input size", nullptr, {}, 1, 16384},
      {"h", "hidden size", nullptr, {}, 1, 16384},
      params,
  };
}

void GruQuantOp::validate(const nlohmann::json& p) const {
  const std::string text = p.at("params").get<std::string>();
  const nlohmann::json doc = parse_json_input(text, "gru_quant params", "spec");
  const gru::GruParams g = gru::GruParams::from_json(doc);
  if (g.input_size != p.at("c").get<int64_t>() || g.hidden_size != p.at("h").get<int64_t>())
    throw Error("spec", "gru_quant params are for input_size " + std::to_string(g.input_size) + ", hidden_size " +
                            std::to_string(g.hidden_size) + "; the spec has c=" + p.at("c").dump() + ", h=" + p.at("h").dump());
  if (g.to_json().dump() != text)
    throw Error("spec", "gru_quant params are not in canonical form (pass them through codegen::gru::canonical_params, "
                        "which also writes out the fitted LUTs the cache key must cover)");
}

std::vector<ArgDef> GruQuantOp::args() const { return {{"x"}, {"h0"}, {"W"}, {"R"}, {"bw"}, {"br"}, {"y"}}; }

std::vector<nlohmann::json> GruQuantOp::candidates(const OpSpec&, const DeviceLimits&) const {
  std::vector<nlohmann::json> out;
  for (int threads : {32, 64, 128, 256}) out.push_back(Config{threads}.to_json());
  return out;
}

nlohmann::json GruQuantOp::default_config(const OpSpec&) const { return Config{128}.to_json(); }

void GruQuantOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  const std::string p = config_problem(Config::from(config));
  if (!p.empty()) throw Error("config", "gru_quant config " + json_excerpt(config) + " is illegal for " + spec.label() + ": " + p);
}

std::vector<Constant> GruQuantOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const gru::GruParams p = gru::params_of(spec);
  auto num = [](int64_t v) { return std::to_string(v); };
  // Per gate row (3H): the bias's shift into the GEMM's scale, and the GEMM's shift to the linear output.
  std::vector<int64_t> ih_bias, ih_out, hh_bias, hh_out;
  for (size_t r = 0; r < p.W.shift.size(); ++r) {
    ih_bias.push_back(p.bw.shift[r] - (p.W.shift[r] + p.x.shift));
    ih_out.push_back(p.W.shift[r] + p.x.shift - p.ih.shift);
    hh_bias.push_back(p.br.shift[r] - (p.R.shift[r] + p.h.shift));
    hh_out.push_back(p.R.shift[r] + p.h.shift - p.hh.shift);
  }
  const auto range = [&](const std::string& name, const gru::QTensor& t) {
    return std::vector<Constant>{{"long long", name + "Zp", num(t.zp), ""},
                                 {"long long", name + "Lo", num(t.lo()), ""},
                                 {"long long", name + "Hi", num(t.hi()), ""}};
  };
  std::vector<Constant> out = {
      {"int", "kT", num(spec.get_int("t")), "time steps"},
      {"int", "kN", num(spec.get_int("n")), "sequences"},
      {"int", "kC", num(p.input_size), "input size"},
      {"int", "kH", num(p.hidden_size), "hidden size"},
      {"int", "kThreads", num(c.threads), "tunable: threads per block"},
  };
  for (const auto& [name, t] : std::vector<std::pair<std::string, const gru::QTensor*>>{
           {"kX", &p.x}, {"kHid", &p.h}, {"kIh", &p.ih}, {"kHh", &p.hh}, {"kUIn", &p.u_in}, {"kUOut", &p.u_out},
           {"kRIn", &p.r_in}, {"kROut", &p.r_out}, {"kNIn", &p.n_in}, {"kNOut", &p.n_out}})
    for (auto& k : range(name, *t)) out.push_back(k);
  const std::vector<Constant> shifts = {
      {"int", "kIhToUIn", num(p.ih.shift - p.u_in.shift), "ih to the update gate's input"},
      {"int", "kHhToUIn", num(p.hh.shift - p.u_in.shift), ""},
      {"int", "kIhToRIn", num(p.ih.shift - p.r_in.shift), "ih to the reset gate's input"},
      {"int", "kHhToRIn", num(p.hh.shift - p.r_in.shift), ""},
      {"int", "kIhToNIn", num(p.ih.shift - p.n_in.shift), "ih to the new gate's input"},
      {"int", "kRHhToNIn", num(p.r_out.shift + p.hh.shift - p.n_in.shift), "r·(hh − zp) to the new gate's input"},
      {"int", "kNOutToHid", num(p.n_out.shift - p.h.shift), "n aligned to h's scale"},
      {"int", "kUOutShift", num(p.u_out.shift), "S_u·S_h to S_h: the final rescale"},
      {"long long", "kQOne", num((int64_t{1} << p.u_out.shift) + p.u_out.zp), "1 in u_out's space: round(2^shift) + zp"},
  };
  out.insert(out.end(), shifts.begin(), shifts.end());
  out.push_back(array_struct("Rows", {{"kIhBias", ih_bias}, {"kIhOut", ih_out}, {"kHhBias", hh_bias}, {"kHhOut", hh_out}},
                             "per gate row: bias shift into the GEMM's scale, GEMM shift to the linear output"));
  out.push_back(lut_struct("ULut", p.u_lut));
  out.push_back(lut_struct("RLut", p.r_lut));
  out.push_back(lut_struct("NLut", p.n_lut));
  return out;
}

// The step plan: qjit_gru_input computes W·x + bw for all T·N rows into the
// workspace (int32 [T·N][3H]); then qjit_gru_step runs T times, step t reading
// h_{t-1} (h0, or y's row t−1) and writing y's row t.
Plan GruQuantOp::plan(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const int64_t t = spec.get_int("t"), n = spec.get_int("n"), h = spec.get_int("h");
  Plan p;
  KernelDef input;
  input.symbol = "qjit_gru_input";
  input.geometry.grid[0] = static_cast<unsigned>(t * n);
  input.geometry.grid[1] = static_cast<unsigned>((3 * h + c.threads - 1) / c.threads);
  input.geometry.block[0] = static_cast<unsigned>(c.threads);
  input.params = {arg_param("x"), arg_param("W"), arg_param("bw"), workspace_param(0)};
  KernelDef step;
  step.symbol = "qjit_gru_step";
  step.geometry.grid[0] = static_cast<unsigned>(n);
  step.geometry.grid[1] = static_cast<unsigned>((h + c.threads - 1) / c.threads);
  step.geometry.block[0] = static_cast<unsigned>(c.threads);
  step.params = {iteration_param(), workspace_param(0), arg_param("h0"), arg_param("R"), arg_param("br"), arg_param("y")};
  p.kernels = {input, step};
  PlanStep first{PlanStep::Kind::kernel, 0, {}};
  PlanStep steps{PlanStep::Kind::kernel, 1, {}};
  steps.repeat = t;
  p.steps = {first, steps};
  p.pointers = {{"x", 4}, {"h0", 4}, {"W", 1}, {"R", 1}, {"bw", 4}, {"br", 4}, {"y", 4}};
  p.workspace_fixed = static_cast<size_t>(t * n * 3 * h) * 4;
  return p;
}

Traffic GruQuantOp::traffic(const OpSpec& spec) const {
  const double t = static_cast<double>(spec.get_int("t")), n = static_cast<double>(spec.get_int("n")),
               c = static_cast<double>(spec.get_int("c")), h = static_cast<double>(spec.get_int("h"));
  // x, W, the ih workspace written and read, R read every step, h read and y written.
  return {t * n * c * 4 + 3 * h * c + 2 * t * n * 3 * h * 4 + t * 3 * h * h + 2 * t * n * h * 4,
          2 * t * n * 3 * h * (c + h)};
}

const OpDef& gru_quant_op() {
  static const GruQuantOp op;
  return op;
}

}  // namespace qjit::codegen
