#include "codegen/ops/fp_lut.h"
#include <cstdio>
#include <sstream>
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/numeric.h"

namespace qjit::codegen {
namespace {

int bytes_of(const std::string& t) { return t == "fp32" ? 4 : 2; }
const char* type_of(const std::string& t) {
  return t == "fp32" ? "float" : t == "bf16" ? "qjit::bf16_t" : "qjit::half_t";
}

struct Config {
  int threads;    // threads per block
  int vec_bytes;  // bytes of input per vector load
  int items;      // vectors per thread
  std::string table;  // "shared" | "global" (259 entries, interpolate) | "direct" (every fp16 input precomputed)
  int blocks_per_sm;  // direct: persistent grid of this many blocks per SM (each copies the 128 KB map once); else 0

  static Config from(const nlohmann::json& j) {
    auto get = [&](const char* k) { return config_int(j, k, "fp_lut config"); };
    if (!j.is_object() || !j.contains("table") || !j["table"].is_string() || j.size() != 5)
      throw Error("config", "fp_lut config needs threads, vec_bytes, items, table and blocks_per_sm: " + j.dump());
    return {get("threads"), get("vec_bytes"), get("items"), j["table"].get<std::string>(), get("blocks_per_sm")};
  }
  nlohmann::json to_json() const {
    return {{"threads", threads}, {"vec_bytes", vec_bytes},         {"items", items},
            {"table", table},     {"blocks_per_sm", blocks_per_sm}};
  }
};

std::string config_problem(const OpSpec& spec, const Config& c) {
  const int in = bytes_of(spec.get_str("in"));
  if (c.threads != 128 && c.threads != 256 && c.threads != 512 && c.threads != 1024)
    return "threads must be 128, 256, 512 or 1024";
  if (c.vec_bytes != 4 && c.vec_bytes != 8 && c.vec_bytes != 16) return "vec_bytes must be 4, 8 or 16";
  if (c.vec_bytes < in) return "vec_bytes is smaller than one input element";
  if (c.items != 1 && c.items != 2 && c.items != 4 && c.items != 8) return "items must be 1, 2, 4 or 8";
  // Constant memory is not offered: a warp's lookups hit many different
  // entries, and the constant cache serialises distinct addresses.
  if (c.table != "shared" && c.table != "global" && c.table != "direct") return "table must be shared, global or direct";
  if (c.table == "direct") {
    if (spec.get_str("out") == "fp32") return "the direct strategy stores 16-bit outputs (out=fp16 or bf16)";
    if (c.blocks_per_sm != 1 && c.blocks_per_sm != 2 && c.blocks_per_sm != 4)
      return "direct blocks_per_sm must be 1, 2 or 4";
  } else if (c.blocks_per_sm != 0) {
    return "blocks_per_sm applies to the direct strategy only (use 0)";
  }
  return "";
}

std::string float_literal(float f) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9gf", f);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s.insert(s.size() - 1, ".0");
  return s;
}

}  // namespace

lut::Table lut_table_of(const OpSpec& spec) {
  const std::string fn = spec.get_str("fn"), cuts_s = spec.get_str("cuts"), values_s = spec.get_str("values");
  std::array<float, lut::kCutCount> cuts{};
  if (cuts_s == "default") {
    if (fn == "custom") throw Error("spec", "fn=custom needs explicit cuts and values");
    cuts = lut::default_cuts(fn);
  } else if (cuts_s == "seed") {
    if (fn != "silu") throw Error("spec", "cuts=seed is the seed's SiLU table; fn is '" + fn + "'");
    cuts = lut::seed_silu_cuts();
  } else {
    auto bits = lut::decode_halves(cuts_s, lut::kCutCount);
    for (int i = 0; i < lut::kCutCount; ++i) cuts[i] = half_to_float(bits[i]);
  }
  if (values_s.empty()) {
    if (fn == "custom") throw Error("spec", "fn=custom needs values=<259 fp16 hex values>");
    return lut::build(fn, cuts);
  }
  auto bits = lut::decode_halves(values_s, lut::kEntries);
  std::array<uint16_t, lut::kEntries> v{};
  std::copy(bits.begin(), bits.end(), v.begin());
  lut::Table t = lut::from_values(cuts, v);
  t.fn = fn;
  return t;
}

Constant lut_struct(const lut::Table& t) {
  std::ostringstream s;
  s << "  static constexpr bool kReduceAngle = " << (lut::reduces_angle(t.fn) ? "true" : "false")
    << ";  // sin/cos: x mod 2π first\n  static constexpr float kCuts[11] = {";
  for (int i = 0; i < lut::kCutCount; ++i) s << (i ? ", " : "") << float_literal(t.cuts[i]);
  s << "};\n  static constexpr float kScales[10] = {";
  for (int i = 0; i < 10; ++i) s << (i ? ", " : "") << float_literal(t.scales[i]);
  s << "};\n  static constexpr unsigned short kTable[259] = {  // fp16 bits";
  for (int i = 0; i < lut::kEntries; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%04x", t.values[i]);
    s << (i % 12 == 0 ? "\n      " : " ") << buf << (i + 1 < lut::kEntries ? "," : "");
  }
  s << "};\n";
  return {"struct", "Lut", s.str(), "lookup table for " + t.fn + ": 11 cut points, 259 fp16 values"};
}

std::vector<ParamDef> FpLutOp::params() const {
  std::vector<std::string> fns = lut::function_names();
  fns.push_back("custom");
  ParamDef cuts{"cuts", "cut points: default, seed (SiLU) or 11 fp16 hex values a:b:...", "default", {}};
  cuts.free_string = true;
  ParamDef values{"values", "259 fp16 hex values (fn=custom), empty: sampled from fn", "", {}};
  values.free_string = true;
  return {
      {"n", "number of elements", nullptr, {}, 1, int64_t{1} << 40},
      {"fn", "function the table samples", nullptr, fns},
      cuts,
      values,
      {"in", "input type", "fp16", {"fp16", "bf16", "fp32"}},
      {"out", "output type", "fp16", {"fp16", "bf16", "fp32"}},
  };
}

void FpLutOp::validate(const nlohmann::json& params) const {
  OpSpec spec{"fp_lut", params};
  lut_table_of(spec);  // throws for bad cuts/values
}

std::vector<nlohmann::json> FpLutOp::candidates(const OpSpec& spec, const DeviceLimits&) const {
  std::vector<nlohmann::json> out;
  // 16- and 8-byte vectors (4 only for fp32 inputs: narrower only adds
  // instructions). The direct strategy runs one 128 KB block per SM, so it
  // also gets 1024 threads and 8 vectors in flight to keep enough bytes moving.
  for (int threads : {256, 512, 1024})
    for (int vec : {16, 8, 4})
      for (int items : {1, 2, 4, 8})
        for (const char* table : {"shared", "global", "direct"})
          for (int blocks_per_sm : {0, 1, 2, 4}) {
            Config c{threads, vec, items, table, blocks_per_sm};
            const bool narrow = vec == 4 && bytes_of(spec.get_str("in")) < 4;
            const bool wide = ((threads == 1024 || items == 8) && c.table != "direct") ||
                              (threads == 1024 && items == 8);  // 64 registers at 1024 threads: spills
            if (!narrow && !wide && config_problem(spec, c).empty()) out.push_back(c.to_json());
          }
  return out;
}

nlohmann::json FpLutOp::default_config(const OpSpec& spec) const {
  Config c{512, 16, 2, "direct", 2};
  if (config_problem(spec, c).empty()) return c.to_json();
  return Config{256, 16, 2, "shared", 0}.to_json();
}

void FpLutOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  const std::string p = config_problem(spec, Config::from(config));
  if (!p.empty()) throw Error("config", "fp_lut config " + config.dump() + " is illegal for " + spec.label() + ": " + p);
}

std::vector<Constant> FpLutOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const std::string in = spec.get_str("in"), out = spec.get_str("out");
  return {
      {"using", "TIn", type_of(in), "input element type"},
      {"using", "TOut", type_of(out), "output element type"},
      {"long long", "kN", std::to_string(spec.get_int("n")), "elements"},
      {"int", "kThreads", std::to_string(c.threads), "tunable: threads per block"},
      {"int", "kVecElems", std::to_string(c.vec_bytes / bytes_of(in)), "tunable: inputs per vector load"},
      {"int", "kItems", std::to_string(c.items), "tunable: vectors per thread"},
      {"bool", "kTableInShared", c.table == "shared" ? "true" : "false", "tunable: table copied to shared memory"},
      {"bool", "kDirect", c.table == "direct" ? "true" : "false", "tunable: all 65536 fp16 inputs precomputed"},
      lut_struct(lut_table_of(spec)),
  };
}

std::vector<ArgDef> FpLutOp::args() const { return {{"x"}, {"y"}}; }

// One call: qjit_fp_lut over the n elements. The direct strategy first fills
// its map of every fp16 input once per module load (qjit_fp_lut_init, a
// grid-stride loop), which the kernel's blocks copy to shared memory.
Plan FpLutOp::plan(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const int in_bytes = bytes_of(spec.get_str("in")), elems = c.vec_bytes / in_bytes;
  const int64_t chunk = int64_t{c.threads} * c.items * elems;
  LaunchGeometry g;
  const int64_t chunks = (spec.get_int("n") + chunk - 1) / chunk;
  g.grid[0] = static_cast<unsigned>(chunks);
  if (c.table == "direct") {
    // A persistent grid of blocks_per_sm blocks on each of the device's SMs,
    // never more blocks than chunks of work; one block's 128 KB table
    // already keeps the others off its SM.
    g.grid_per_sm = static_cast<unsigned>(c.blocks_per_sm);
    g.max_grid = static_cast<unsigned>(std::min<int64_t>(chunks, UINT32_MAX));
    g.claim_sm_share = false;
  }
  g.block[0] = static_cast<unsigned>(c.threads);
  g.dynamic_smem = c.table == "direct" ? 65536 * 2 : 0;  // the map of every fp16 input
  Plan p = single_kernel_plan("qjit_fp_lut", g, arg_params({"x", "y"}),
                              {{"x", c.vec_bytes}, {"y", std::min(16, elems * bytes_of(spec.get_str("out")))}});
  if (c.table == "direct") {
    LaunchGeometry init;
    init.grid[0] = 256, init.block[0] = 256;
    p.kernels.push_back({"qjit_fp_lut_init", KernelDef::Role::init, init, {}, {}});
  }
  return p;
}

Traffic FpLutOp::traffic(const OpSpec& spec) const {
  const double n = static_cast<double>(spec.get_int("n"));
  return {n * (bytes_of(spec.get_str("in")) + bytes_of(spec.get_str("out"))), 0};
}

const OpDef& fp_lut_op() {
  static const FpLutOp op;
  return op;
}

}  // namespace qjit::codegen
