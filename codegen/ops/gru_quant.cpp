#include "codegen/ops/gru_quant.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen {
namespace {

// Two plan families (docs/gru_quant.md):
//   step:    {"family": "step", "threads": T} — a launch per step, CUDA cores;
//   cluster: {"family": "cluster", "cluster": CS, "batch": Nc, "warps": W,
//             "ksplit": KS, "input": "fused"|"pre"} — one launch, R in the
//            shared memory of a cluster of CS blocks, Nc sequences per cluster.
struct Config {
  std::string family;
  int threads = 0;                                   // step
  int cluster = 0, batch = 0, warps = 0, ksplit = 0;  // cluster
  bool fused = false;                                // cluster: W·x inside the persistent kernel

  static Config from(const nlohmann::json& j) {
    const std::string f = config_family(j);
    const char* what = "gru_quant config";
    Config c;
    c.family = f;
    if (f == "step" && j.size() == 2) {
      c.threads = config_int(j, "threads", what);
      return c;
    }
    if (f == "cluster" && j.size() == 6 && j.contains("input") && j["input"].is_string()) {
      c.cluster = config_int(j, "cluster", what);
      c.batch = config_int(j, "batch", what);
      c.warps = config_int(j, "warps", what);
      c.ksplit = config_int(j, "ksplit", what);
      const std::string input = j["input"].get<std::string>();
      if (input != "fused" && input != "pre")
        throw Error("config", "gru_quant config \"input\" must be \"fused\" or \"pre\": " + json_excerpt(j));
      c.fused = input == "fused";
      return c;
    }
    throw Error("config", "gru_quant config needs {\"family\": \"step\", \"threads\"} or {\"family\": \"cluster\", "
                          "\"cluster\", \"batch\", \"warps\", \"ksplit\", \"input\"}: " + json_excerpt(j));
  }
  nlohmann::json to_json() const {
    if (family == "step") return {{"family", "step"}, {"threads", threads}};
    return {{"family", "cluster"}, {"cluster", cluster}, {"batch", batch}, {"warps", warps},
            {"ksplit", ksplit},    {"input", fused ? "fused" : "pre"}};
  }
};

// |u·(h − zp) + (1 − u)·(n aligned to h)| before the final rescale (the
// bound validation checks after it).
double combined_bound(const gru::GruParams& p) {
  const double aligned = std::ldexp(static_cast<double>(p.n_out.hi() - p.n_out.lo()), -(p.n_out.shift - p.h.shift)) + 1;
  const double one = std::ldexp(1.0, p.u_out.shift) + static_cast<double>(p.u_out.zp);
  const double one_minus_u = std::max(std::fabs(one - static_cast<double>(p.u_out.lo())), std::fabs(one - static_cast<double>(p.u_out.hi())));
  return static_cast<double>(p.u_out.hi() - p.u_out.lo()) * static_cast<double>(p.h.hi() - p.h.lo()) + one_minus_u * aligned;
}

// A power of two as a C++ hexadecimal literal (exact, unlike a decimal one).
std::string hexfloat(double v) {
  std::ostringstream s;
  s << std::hexfloat << v;
  return s.str();
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The cluster plan's derived sizes (templates/gru_quant/gru_quant_cluster.cu
// lays its shared memory out from the same numbers and asserts the total).
struct ClusterShape {
  int64_t hs = 0;              // hidden units per block, a multiple of 16
  int64_t rows = 0;            // 3·hs gate rows per block
  int64_t n_tiles = 0;         // ceil(batch / 8)
  int64_t kh = 0, kx = 0;      // k steps of 32 over H and C
  int h_planes = 1, x_planes = 1;
  int64_t pair_slots = 0;      // (sequence, unit) pairs per thread
  int64_t lut_words = 0;       // the three LUTs tabulated in shared memory (0: evaluated)
  int64_t smem = 0;            // dynamic shared memory, bytes

  ClusterShape(const Config& c, const gru::GruParams& p) {
    const int64_t h = p.hidden_size, cin = p.input_size;
    hs = round_up((h + c.cluster - 1) / c.cluster, 16);
    rows = 3 * hs;
    n_tiles = (c.batch + 7) / 8;
    kh = (h + 31) / 32;
    kx = (cin + 31) / 32;
    h_planes = p.h.bits > 8 ? 2 : 1;
    x_planes = p.x.bits > 8 ? 2 : 1;
    pair_slots = (c.batch * hs + c.warps * 32 - 1) / (c.warps * 32);
    // Tables for LUT inputs of up to 10 bits (at most 12 KB): a load replaces
    // a chain of kCount selects in each gate.
    const auto entries = [](const gru::QTensor& t) { return t.hi() - t.lo() + 1; };
    if (p.u_lut.in.bits <= 10 && p.r_lut.in.bits <= 10 && p.n_lut.in.bits <= 10)
      lut_words = entries(p.u_lut.in) + entries(p.r_lut.in) + entries(p.n_lut.in);
    const int64_t fused = c.fused ? 1 : 0, ncp = n_tiles * 8;
    smem = rows * kh * 32 + fused * rows * kx * 32         // R (and W) in fragment order
           + 2 * h_planes * kh * n_tiles * 256             // h, double buffered
           + fused * x_planes * kx * n_tiles * 256         // x_t
           + 4 * c.ksplit * (h_planes + fused * x_planes) * rows * ncp  // int32 partial sums
           + 12 * rows * (1 + fused)                       // per-row bias (int64) and shift (int32)
           + 16                                            // an mbarrier per h buffer
           + 4 * lut_words;                                // LUT outputs per input code
  }
};

std::string config_problem(const Config& c, const OpSpec& spec, const gru::GruParams& p, const DeviceLimits& device) {
  if (c.family == "step")
    return c.threads == 32 || c.threads == 64 || c.threads == 128 || c.threads == 256 ? ""
                                                                                        : "threads must be 32, 64, 128 or 256";
  if (c.family != "cluster") return "family must be step or cluster";
  if (c.cluster != 2 && c.cluster != 4 && c.cluster != 8 && c.cluster != 16) return "cluster must be 2, 4, 8 or 16";
  if (c.warps != 4 && c.warps != 8 && c.warps != 16) return "warps must be 4, 8 or 16";
  if (c.ksplit != 1 && c.ksplit != 2 && c.ksplit != 4) return "ksplit must be 1, 2 or 4";
  if (c.batch < 1 || c.batch > 64 || c.batch > spec.get_int("n")) return "batch must be within 1..min(64, n)";
  const ClusterShape s(c, p);
  if ((c.cluster - 1) * s.hs >= p.hidden_size) return "some block of the cluster would own no hidden unit";
  if (s.pair_slots > 8) return "more than 8 (sequence, unit) pairs per thread";
  // The fused projection prefetches each thread's share of x_{t+1} into registers.
  if (c.fused && (c.batch * p.input_size + c.warps * 32 - 1) / (c.warps * 32) > 16)
    return "the fused input projection's slice of x is more than 16 codes per thread";
  const int64_t limit = device.smem_per_block();
  if (s.smem > limit)
    return "needs " + std::to_string(s.smem) + " bytes of shared memory per block; the device has " + std::to_string(limit);
  return "";
}

// `struct name { static constexpr T kA[N] = {...}; ... }` from named arrays.
Constant array_struct(const std::string& name, const std::string& type,
                      const std::vector<std::pair<std::string, std::vector<int64_t>>>& arrays, const std::string& comment) {
  std::ostringstream s;
  for (const auto& [member, values] : arrays) {
    s << "  static constexpr " << type << " " << member << "[" << values.size() << "] = {";
    for (size_t i = 0; i < values.size(); ++i) s << (i % 16 == 0 ? "\n      " : " ") << values[i] << (i + 1 < values.size() ? "," : "");
    s << "};\n";
  }
  return {"struct", name, s.str(), comment};
}

constexpr double kInt32Limit = 2147483647.0;

// A LUT as a struct: its segments (ints: thresholds and term_c lie within
// int32 by validation, q_b has 15 bits), the ranges of its input and output,
// and kWide when q_b·(q − zp) before the rescale may leave int32.
Constant lut_struct(const std::string& name, const gru::Lut& l) {
  std::vector<int64_t> thr, qb, n, tc;
  double widest = 0;
  bool positive = true;
  for (const auto& s : l.segments) {
    // A flat segment (q_b = 0) gives rshift_round(0, n) + term_c = term_c for
    // any n: its shift is written as 1, so that a LUT whose sloped segments all
    // shift right takes rshift_round without the branches on n.
    const int shift = s.q_b == 0 && s.n < 1 ? 1 : s.n;
    positive = positive && shift >= 1 && shift < 32;
    thr.push_back(s.threshold), qb.push_back(s.q_b), n.push_back(shift), tc.push_back(s.term_c);
    widest = std::max(widest, std::fabs(static_cast<double>(s.q_b)) * static_cast<double>(l.in.hi() - l.in.lo()));
  }
  Constant c = array_struct(name, "int", {{"kThreshold", thr}, {"kQb", qb}, {"kShift", n}, {"kTermC", tc}},
                            l.fn + ": y = rshift_round(kQb[i]·(q − kInZp), kShift[i]) + kTermC[i], segment i the first "
                                   "with q < kThreshold[i] (else the last)");
  std::ostringstream s;
  s << "  static constexpr int kCount = " << l.segments.size() << ";\n"
    << "  static constexpr int kInLo = " << l.in.lo() << ", kInHi = " << l.in.hi() << ", kInZp = " << l.in.zp
    << ";\n  static constexpr int kOutLo = " << l.out.lo() << ", kOutHi = " << l.out.hi() << ";\n"
    << "  static constexpr bool kWide = " << (widest > kInt32Limit ? "true" : "false") << ";\n"
    << "  static constexpr bool kPositiveShifts = " << (positive ? "true" : "false") << ";\n";
  c.value = s.str() + c.value;
  return c;
}

// Whether a linear layer's GEMM sum may leave int32: |Σ w·v| over `k` terms
// with the raw codes (the cluster plan's planes) or centred ones, plus the
// zero-point term and the largest bias in the GEMM's scale.
bool sum_is_wide(int64_t k, const gru::QWeight& w, const gru::QTensor& v, const gru::QWeight& b, int v_shift) {
  const double codes = static_cast<double>(std::max(std::llabs(v.lo()), std::llabs(v.hi())));
  const double zp = std::fabs(static_cast<double>(v.zp)), spread = static_cast<double>(v.hi() - v.lo());
  double bias = 0;
  for (size_t c = 0; c < w.shift.size(); ++c)
    bias = std::max(bias, std::ldexp(static_cast<double>(b.max_abs()), -(b.shift[c] - (w.shift[c] + v_shift))) + 1);
  return static_cast<double>(k) * static_cast<double>(w.max_abs()) * (codes + zp + spread) + bias > kInt32Limit;
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

std::vector<ArgDef> GruQuantOp::args() const { return {{"x"}, {"h0"}, {"W"}, {"R"}, {"bw"}, {"br"}, {"y"}, {"y_float"}}; }

Config step_config(int threads) {
  Config c;
  c.family = "step";
  c.threads = threads;
  return c;
}

std::string GruQuantOp::template_path(const nlohmann::json& config) const {
  return Config::from(config).family == "cluster" ? "templates/gru_quant/gru_quant_cluster.cu"
                                                  : "templates/gru_quant/gru_quant_step.cu";
}

bool GruQuantOp::needs_sm90a(const nlohmann::json& config) const { return Config::from(config).family == "cluster"; }

std::vector<nlohmann::json> GruQuantOp::candidates(const OpSpec& spec, const DeviceLimits& device) const {
  std::vector<nlohmann::json> out;
  for (int threads : {32, 64, 128, 256}) out.push_back(step_config(threads).to_json());
  const gru::GruParams p = gru::params_of(spec);
  const int64_t n = spec.get_int("n");
  std::vector<int> batches;
  for (int b : {8, 16, 32, 64}) {
    const int v = static_cast<int>(std::min<int64_t>(b, n));
    if (std::find(batches.begin(), batches.end(), v) == batches.end()) batches.push_back(v);
  }
  for (int cluster : {2, 4, 8, 16})
    for (int batch : batches)
      for (int warps : {4, 8, 16})
        for (int ksplit : {1, 2, 4})
          for (bool fused : {true, false}) {
            Config c;
            c.family = "cluster";
            c.cluster = cluster, c.batch = batch, c.warps = warps, c.ksplit = ksplit, c.fused = fused;
            if (config_problem(c, spec, p, device).empty()) out.push_back(c.to_json());
          }
  return out;
}

nlohmann::json GruQuantOp::default_config(const OpSpec&) const { return step_config(128).to_json(); }

void GruQuantOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  const std::string p = config_problem(Config::from(config), spec, gru::params_of(spec), DeviceLimits{});
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
  const auto literal = [](bool b) { return std::string(b ? "true" : "false"); };
  const auto range = [&](const std::string& name, const gru::QTensor& t) {
    return std::vector<Constant>{{"int", name + "Zp", num(t.zp), ""},
                                 {"int", name + "Lo", num(t.lo()), ""},
                                 {"int", name + "Hi", num(t.hi()), ""}};
  };
  std::vector<Constant> out = {
      {"int", "kT", num(spec.get_int("t")), "time steps"},
      {"int", "kN", num(spec.get_int("n")), "sequences"},
      {"int", "kC", num(p.input_size), "input size"},
      {"int", "kH", num(p.hidden_size), "hidden size"},
  };
  if (c.family == "step") {
    out.push_back({"int", "kThreads", num(c.threads), "tunable: threads per block"});
  } else {
    const ClusterShape cs(c, p);
    const std::vector<Constant> cluster = {
        {"int", "kCS", num(c.cluster), "tunable: blocks per cluster"},
        {"int", "kNc", num(c.batch), "tunable: sequences per cluster"},
        {"int", "kWarps", num(c.warps), "tunable: warps per block"},
        {"int", "kKSplit", num(c.ksplit), "tunable: k ranges of a block's GEMM, one task each"},
        {"bool", "kFused", literal(c.fused), "tunable: W·x computed inside the persistent kernel"},
        {"int", "kHs", num(cs.hs), "hidden units per block (a multiple of 16)"},
        {"int", "kNT", num(cs.n_tiles), "n tiles of 8 sequences"},
        {"int", "kKH", num(cs.kh), "k steps of 32 over H"},
        {"int", "kKX", num(cs.kx), "k steps of 32 over C"},
        {"int", "kHPlanes", num(cs.h_planes), "byte planes of an h code"},
        {"int", "kXPlanes", num(cs.x_planes), "byte planes of an x code"},
        {"bool", "kHSigned", literal(p.h.is_signed), ""},
        {"bool", "kXSigned", literal(p.x.is_signed), ""},
        {"int", "kSmemBytes", num(cs.smem), "dynamic shared memory of the persistent kernel"},
        {"int", "kLutWords", num(cs.lut_words), "LUT outputs tabulated in shared memory (0: chains of selects)"},
    };
    out.insert(out.end(), cluster.begin(), cluster.end());
  }
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
      {"float", "kHidScale", hexfloat(std::ldexp(1.0, -p.h.shift)) + "f", "2^−shift_h: y_float = (y − zp_h)·kHidScale, exact"},
      {"long long", "kQOne", num((int64_t{1} << p.u_out.shift) + p.u_out.zp), "1 in u_out's space: round(2^shift) + zp"},
      {"bool", "kWideSumH", literal(sum_is_wide(p.hidden_size, p.R, p.h, p.br, p.h.shift)), "R·h may leave int32"},
      {"bool", "kWideSumX", literal(sum_is_wide(p.input_size, p.W, p.x, p.bw, p.x.shift)), "W·x may leave int32"},
      {"bool", "kWideRHh", literal(static_cast<double>(p.r_out.hi() - p.r_out.lo()) * static_cast<double>(p.hh.hi() - p.hh.lo()) > kInt32Limit),
       "r·hh_n before its rescale may leave int32"},
      {"bool", "kWideCombined", literal(combined_bound(p) > kInt32Limit), "the new h before its rescale may leave int32"},
  };
  out.insert(out.end(), shifts.begin(), shifts.end());
  const auto all_positive = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t s) { return s >= 1 && s < 32; });
  };
  out.push_back({"bool", "kHhOutPositive", literal(all_positive(hh_out)), "every R·h row shifts right by 1..31"});
  out.push_back({"bool", "kIhOutPositive", literal(all_positive(ih_out)), "every W·x row shifts right by 1..31"});
  out.push_back(array_struct("Rows", "long long", {{"kIhBias", ih_bias}, {"kIhOut", ih_out}, {"kHhBias", hh_bias}, {"kHhOut", hh_out}},
                             "per gate row: bias shift into the GEMM's scale, GEMM shift to the linear output"));
  out.push_back(lut_struct("ULut", p.u_lut));
  out.push_back(lut_struct("RLut", p.r_lut));
  out.push_back(lut_struct("NLut", p.n_lut));
  return out;
}

// The step plan: qjit_gru_input computes W·x + bw for all T·N rows into the
// workspace (int32 [T·N][3H]); then qjit_gru_step runs T times, step t reading
// h_{t-1} (h0, or y's row t−1) and writing y's row t.
// The cluster plan: one launch of qjit_gru_cluster, ceil(N / batch) clusters
// of CS blocks; with input "pre", qjit_gru_input_mma fills the same
// workspace first.
Plan GruQuantOp::plan(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const int64_t t = spec.get_int("t"), n = spec.get_int("n"), h = spec.get_int("h"), cin = spec.get_int("c");
  Plan p;
  p.pointers = {{"x", 4}, {"h0", 4}, {"W", 1}, {"R", 1}, {"bw", 4}, {"br", 4}, {"y", 4}, {"y_float", 4, true}};
  if (c.family == "step") {
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
    step.params = {iteration_param(), workspace_param(0), arg_param("h0"), arg_param("R"),
                   arg_param("br"),    arg_param("y"),     arg_param("y_float")};
    p.kernels = {input, step};
    PlanStep first{PlanStep::Kind::kernel, 0, {}};
    PlanStep steps{PlanStep::Kind::kernel, 1, {}};
    steps.repeat = t;
    p.steps = {first, steps};
    p.workspace_fixed = static_cast<size_t>(t * n * 3 * h) * 4;
    return p;
  }
  const ClusterShape cs(c, gru::params_of(spec));
  // R's (and W's) rows are read a 32-bit word at a time when their length is a multiple of 4.
  p.pointers[3].align = h % 4 == 0 ? 4 : 1;
  p.pointers[2].align = cin % 4 == 0 ? 4 : 1;
  KernelDef persistent;
  persistent.symbol = "qjit_gru_cluster";
  persistent.geometry.grid[0] = static_cast<unsigned>(c.cluster * ((n + c.batch - 1) / c.batch));
  persistent.geometry.block[0] = static_cast<unsigned>(c.warps * 32);
  persistent.geometry.dynamic_smem = static_cast<unsigned>(cs.smem);
  persistent.geometry.cluster_non_portable = c.cluster > 8;
  persistent.params = {arg_param("x"),  arg_param("h0"), arg_param("W"),      arg_param("R"),
                       arg_param("bw"), arg_param("br"), workspace_param(0), arg_param("y"), arg_param("y_float")};
  if (c.fused) {
    p.kernels = {persistent};
    p.steps = {PlanStep{PlanStep::Kind::kernel, 0, {}}};
    return p;
  }
  KernelDef input;
  input.symbol = "qjit_gru_input_mma";
  input.geometry.grid[0] = static_cast<unsigned>((t * n + 63) / 64);  // 64 rows (t, n) per block
  input.geometry.grid[1] = static_cast<unsigned>((3 * h + 63) / 64);  // 4 warps of 16 channels
  input.geometry.block[0] = 128;
  input.params = {arg_param("x"), arg_param("W"), arg_param("bw"), workspace_param(0)};
  p.kernels = {input, persistent};
  p.steps = {PlanStep{PlanStep::Kind::kernel, 0, {}}, PlanStep{PlanStep::Kind::kernel, 1, {}}};
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
