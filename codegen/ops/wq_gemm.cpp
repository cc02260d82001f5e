#include "codegen/ops/wq_gemm.h"
#include <algorithm>
#include "codegen/error.h"

namespace qjit::codegen {
namespace {

// The tunables of the mma family. A block has `warps` warps: warps/split_k
// row groups of `tiles` 16-row tiles of W (rows = output columns n), each
// group's chunks of 64 k shared round-robin by split_k warps and summed
// through shared memory. A block covers 8·mtiles rows of x per pass.
struct Config {
  int warps, split_k, tiles, mtiles, unroll;
  int stages = 0;  // 0: register pipeline (unroll groups ahead); >0: cp.async ring of that depth

  static Config from(const nlohmann::json& j) {
    auto get = [&](const char* k) {
      if (!j.contains(k) || !j[k].is_number_integer())
        throw Error("config", std::string("wq_gemm config needs integer '") + k + "': " + j.dump());
      return j[k].get<int>();
    };
    if (!j.is_object() || j.size() != 6)
      throw Error("config", "wq_gemm config needs warps, split_k, tiles, mtiles, unroll and stages: " + j.dump());
    return {get("warps"), get("split_k"), get("tiles"), get("mtiles"), get("unroll"), get("stages")};
  }
  nlohmann::json to_json() const {
    return {{"warps", warps},   {"split_k", split_k}, {"tiles", tiles},
            {"mtiles", mtiles}, {"unroll", unroll},   {"stages", stages}};
  }
};

const char* type_of(const std::string& t) {
  return t == "fp32" ? "float" : t == "bf16" ? "qjit::bf16_t" : "qjit::half_t";
}
int bytes_of(const std::string& t) { return t == "fp32" ? 4 : 2; }

bool one_of(int v, std::initializer_list<int> set) {
  for (int s : set)
    if (v == s) return true;
  return false;
}

// Rows of x a kernel for bucket m must cover in one pass, in tiles of 8 (at most 8 tiles).
int mtiles_needed(int64_t m) { return static_cast<int>(std::min<int64_t>((m + 7) / 8, 8)); }

// Shared memory of the split-k reduction: one fp32 per accumulator per warp.
int64_t reduction_bytes(const Config& c) {
  return c.split_k > 1 ? int64_t{c.warps} * c.tiles * c.mtiles * 4 * 32 * 4 : 0;
}

// One slot of the cp.async ring (the template's kSlotWords): a warp's chunk
// of weights, its scales and zeros, and the pass's rows of x for 64 k.
int64_t slot_bytes(const OpSpec& spec, const Config& c) {
  const int64_t bits = spec.get_int("bits"), g = spec.get_int("g"), m = spec.get_int("m");
  const std::string zero = spec.get_str("zero");
  const int64_t groups = g < 64 ? 64 / g : 1, zero_bytes = zero == "int" ? 1 : zero == "float" ? 2 : 0;
  const int64_t x_rows = std::min<int64_t>(m, 8 * c.mtiles);
  return c.tiles * bits * 32 * 4 + c.tiles * groups * 16 * (2 + zero_bytes) +
         x_rows * 64 * bytes_of(spec.get_str("x"));
}

std::string config_problem(const OpSpec& spec, const Config& c) {
  if (!one_of(c.warps, {2, 4, 8, 16})) return "warps must be 2, 4, 8 or 16";
  if (!one_of(c.split_k, {1, 2, 4, 8, 16}) || c.warps % c.split_k) return "split_k must divide warps";
  if (!one_of(c.tiles, {1, 2, 4})) return "tiles must be 1, 2 or 4";
  if (!one_of(c.mtiles, {1, 2, 4, 8})) return "mtiles must be 1, 2, 4 or 8";
  if (!one_of(c.unroll, {1, 2, 4})) return "unroll must be 1, 2 or 4";
  if (!one_of(c.stages, {0, 2, 4, 8})) return "stages must be 0, 2, 4 or 8";
  if (c.stages > 0 && c.unroll != 1) return "the cp.async ring (stages > 0) takes unroll 1";
  const int64_t m = spec.get_int("m"), k = spec.get_int("k"), n = spec.get_int("n");
  const int bits = static_cast<int>(spec.get_int("bits"));
  if (c.mtiles > mtiles_needed(m)) return "mtiles covers more rows than the bucket m=" + std::to_string(m);
  if (k / 64 < c.split_k) return "split_k exceeds the number of 64-wide chunks of k";
  if (16 * c.tiles > n) return "tiles cover more than n";
  const int64_t ring = int64_t{c.warps} * c.stages * slot_bytes(spec, c);
  if (reduction_bytes(c) + ring > 48 * 1024) return "split-k reduction and cp.async ring need more than 48 KB of shared memory";
  // Registers per lane, fitted to ptxas on sm_90 (within ~20%, on the high
  // side): addresses and indices, accumulators, x fragments, and two groups of
  // chunks (the one multiplied and the one in flight) of weights + raw scales.
  const int x_words = spec.get_str("x") == "fp32" ? 16 : 8;
  const int groups_live = c.stages > 0 ? 1 : 3 * c.unroll;  // the ring holds the in-flight chunks in shared memory
  const int regs = 40 + 4 * c.tiles * c.mtiles + x_words * c.mtiles + groups_live * c.tiles * (bits + 4);
  const int limit = std::min(255, 65536 / (32 * c.warps));  // ptxas's ceiling at this block size
  if (regs > limit)
    return "about " + std::to_string(regs) + " registers per lane (limit " + std::to_string(limit) + " at " +
           std::to_string(c.warps) + " warps)";
  return "";
}

}  // namespace

int wq_gemm_bucket(int64_t m) {
  int b = 1;
  while (b < m && b < 1024) b *= 2;
  return b;
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
  };
}

void WqGemmOp::validate(const nlohmann::json& p) const {
  const int64_t k = p.at("k").get<int64_t>(), n = p.at("n").get<int64_t>(), g = p.at("g").get<int64_t>(),
                m = p.at("m").get<int64_t>(), bits = p.at("bits").get<int64_t>();
  auto s = [](int64_t v) { return std::to_string(v); };
  if (m & (m - 1)) throw Error("spec", "wq_gemm m=" + s(m) + " is not a bucket; expected 1, 2, 4, ..., 1024");
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    throw Error("spec", "wq_gemm bits=" + s(bits) + "; expected 2, 3, 4 or 8");
  if (p.at("layout") != "native")
    throw Error("spec", "wq_gemm runs on the native layout; convert " + p.at("layout").get<std::string>() +
                            " weights once with `qjit repack --from " + p.at("layout").get<std::string>() + "`");
  if (n % 16) throw Error("spec", "wq_gemm n=" + s(n) + " is not a multiple of 16 (native tiles are 16 rows of n)");
  if (k % 64) throw Error("spec", "wq_gemm k=" + s(k) + " is not a multiple of 64 (native tiles are 64 wide in k)");
  if (g != k && g != 32 && g != 64 && g != 128)
    throw Error("spec", "wq_gemm g=" + s(g) + "; expected 32, 64, 128 or k=" + s(k));
  if (k % g) throw Error("spec", "wq_gemm k=" + s(k) + " is not divisible by g=" + s(g));
}

std::vector<nlohmann::json> WqGemmOp::tunable_space(const OpSpec& spec) const {
  std::vector<nlohmann::json> out;
  const int need = mtiles_needed(spec.get_int("m"));
  for (int warps : {4, 8, 16})
    for (int split : {1, 2, 4, 8, 16})
      for (int tiles : {1, 2})
        for (int mt : {1, 2, 4, 8}) {
          // Fewer x tiles than the bucket needs means re-reading W per pass: only worth it at large m.
          if (mt != need && (mt < need / 2 || need < 4)) continue;
          for (int stages : {0, 4, 8})
            for (int unroll : {1, 2, 4}) {
              // 16 warps only to split k further: a 16-warp block of row groups is an 8-warp one twice.
              if (warps == 16 && split < 8) continue;
              const Config c{warps, split, tiles, mt, unroll, stages};
              if (config_problem(spec, c).empty()) out.push_back(c.to_json());
            }
        }
  return out;
}

nlohmann::json WqGemmOp::default_config(const OpSpec& spec) const {
  // 4 warps splitting k four ways, one tile, the bucket's rows of x, the
  // register pipeline without unrolling: the usual winner at small m in the
  // H100 runs of BENCHMARKS.md, and far from the register ceiling.
  for (int split : {4, 2, 1}) {
    const Config c{4, split, 1, mtiles_needed(spec.get_int("m")), 1, 0};
    if (config_problem(spec, c).empty()) return c.to_json();
  }
  return tunable_space(spec).at(0);
}

void WqGemmOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  const std::string p = config_problem(spec, Config::from(config));
  if (!p.empty()) throw Error("config", "wq_gemm config " + config.dump() + " is illegal for " + spec.label() + ": " + p);
}

std::vector<Constant> WqGemmOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  auto num = [](int64_t v) { return std::to_string(v); };
  const std::string zero = spec.get_str("zero"), act = spec.get_str("act");
  return {
      {"using", "TX", type_of(spec.get_str("x")), "type of x, bias and y"},
      {"using", "TS", type_of(spec.get_str("scales")), "type of scales and offsets; the mma input type"},
      {"int", "kK", num(spec.get_int("k")), "input features"},
      {"int", "kN", num(spec.get_int("n")), "output features (rows of W)"},
      {"int", "kBucketM", num(spec.get_int("m")), "rows of x this kernel is tuned for (1024: any)"},
      {"int", "kBits", num(spec.get_int("bits")), "bits per weight"},
      {"int", "kGroup", num(spec.get_int("g")), "k per scale group"},
      {"int", "kZeroMode", zero == "sym" ? "0" : zero == "int" ? "1" : "2", "0 sym, 1 int zero bytes, 2 float offsets"},
      {"bool", "kHasBias", spec.get_str("bias") == "yes" ? "true" : "false", "add bias[n]"},
      {"int", "kAct", act == "none" ? "0" : act == "relu" ? "1" : "2", "0 none, 1 relu, 2 relu6"},
      {"int", "kWarps", num(c.warps), "tunable: warps per block"},
      {"int", "kSplitK", num(c.split_k), "tunable: warps sharing a row group's k"},
      {"int", "kTiles", num(c.tiles), "tunable: 16-row tiles of W per row group"},
      {"int", "kMTiles", num(c.mtiles), "tunable: 8-row tiles of x per pass"},
      {"int", "kUnroll", num(c.unroll), "tunable: 64-wide k chunks loaded before the first mma"},
      {"int", "kStages", num(c.stages), "tunable: 0 register pipeline, else cp.async ring depth"},
  };
}

LaunchGeometry WqGemmOp::launch_geometry(const OpSpec& spec, const nlohmann::json& config) const {
  const Config c = Config::from(config);
  const int64_t rows_per_block = int64_t{16} * c.tiles * (c.warps / c.split_k);
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>((spec.get_int("n") + rows_per_block - 1) / rows_per_block);
  g.grid[1] = static_cast<unsigned>((spec.get_int("m") + 8 * c.mtiles - 1) / (8 * c.mtiles));
  g.block[0] = static_cast<unsigned>(c.warps * 32);
  return g;
}

std::vector<PointerArg> WqGemmOp::pointer_args(const OpSpec& spec, const nlohmann::json& config) const {
  const int bits = static_cast<int>(spec.get_int("bits"));
  const int q_align = 4 * (bits % 4 == 0 ? 4 : bits == 2 ? 2 : 1);
  const std::string zero = spec.get_str("zero");
  const int xb = bytes_of(spec.get_str("x"));
  // The cp.async ring copies scales and zeros in 16-byte pieces.
  const bool ring = Config::from(config).stages > 0;
  return {{"x", 16},
          {"qweight", q_align},
          {"scales", ring ? 16 : 2},
          {"zeros", ring ? 16 : zero == "float" ? 2 : 1, zero == "sym"},
          {"bias", xb, spec.get_str("bias") == "no"},
          {"y", xb}};
}

Traffic WqGemmOp::traffic(const OpSpec& spec) const {
  const double k = static_cast<double>(spec.get_int("k")), n = static_cast<double>(spec.get_int("n")),
               g = static_cast<double>(spec.get_int("g")), m = static_cast<double>(spec.get_int("m")),
               bits = static_cast<double>(spec.get_int("bits"));
  const std::string zero = spec.get_str("zero");
  const double groups = (k / g) * n;
  const double zeros = zero == "sym" ? 0 : zero == "int" ? groups : 2 * groups;
  const double xb = bytes_of(spec.get_str("x"));
  const double bias = spec.get_str("bias") == "yes" ? n * xb : 0;
  return {k * n * bits / 8 + 2 * groups + zeros + m * k * xb + m * n * xb + bias, 2 * m * n * k};
}

}  // namespace qjit::codegen
