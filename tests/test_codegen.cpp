// Tests for codegen/source.* and codegen/ops/fused_ffn.*: the generated
// preamble (every constant named, with the right value), the header comment,
// the tunable space and its pruning rules, the heuristic default, launch
// geometry, the byte/flop model and the template line map.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/error.h"
#include "codegen/ops/fused_ffn.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/spec.h"
#include "codegen/templates.h"
#include "tests/helpers.h"

using namespace qjit::codegen;
using json = nlohmann::json;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The statements of `namespace qjit_spec { ... }`, comments stripped, keyed by
// the name they declare ("kD" -> "constexpr int kD = 4096;").
std::map<std::string, std::string> preamble_statements(const std::string& text) {
  std::map<std::string, std::string> out;
  bool inside = false;
  for (const auto& line : lines_of(text)) {
    if (line.rfind("namespace qjit_spec {", 0) == 0) {
      inside = true;
      continue;
    }
    if (inside && line.rfind("}", 0) == 0) break;
    if (!inside) continue;
    std::string stmt = trim(line.substr(0, line.find("//")));
    if (stmt.empty()) continue;
    std::string name;
    if (stmt.rfind("using ", 0) == 0) name = stmt.substr(6, stmt.find(' ', 6) - 6);
    else {
      size_t eq = stmt.find(" = ");
      size_t sp = stmt.rfind(' ', eq - 1);
      name = stmt.substr(sp + 1, eq - sp - 1);
    }
    CHECK(out.count(name) == 0);  // each name once
    out[name] = stmt;
  }
  return out;
}

OpSpec ffn(int64_t d, int64_t h, int64_t m, const std::string& dtype) {
  return make_spec("fused_ffn", {{"d", d}, {"h", h}, {"m", m}, {"dtype", dtype}});
}

// A CUDA-core ("simt") config.
json cfg(int warps, int rows, int vec, int unroll, int split) {
  return {{"family", "simt"}, {"warps", warps},   {"rows_per_warp", rows},
          {"vec_bytes", vec}, {"unroll", unroll}, {"split_d", split}};
}

bool is_mma(const json& c) { return c.value("family", "simt") == "mma"; }
bool is_cublas(const json& c) { return c.value("family", "simt") == "cublas"; }

// The candidates that are one qjit kernel (simt or mma), without the cublas family's.
std::vector<json> kernel_space(const OpDef& op, const OpSpec& spec) {
  std::vector<json> out;
  for (auto& c : op.tunable_space(spec))
    if (!is_cublas(c)) out.push_back(c);
  return out;
}

// Output rows one block computes: row groups x rows per group.
int64_t rows_per_block(const json& c) {
  const int64_t groups = c["warps"].get<int64_t>() / c["split_d"].get<int64_t>();
  return groups * (is_mma(c) ? 16 * c["tiles"].get<int64_t>() : c["rows_per_warp"].get<int64_t>());
}

void expect_config_error(const OpSpec& spec, const json& config, const std::string& needle) {
  INFO("spec " << spec.label() << " config " << config.dump());
  const auto& op = find_op("fused_ffn");
  bool threw = false;
  try {
    op.validate_config(spec, config);
  } catch (const qjit::Error& e) {
    threw = true;
    CHECK(e.stage() == "config");
    INFO("message: " << e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
  CHECK(threw);
  // generate_source refuses it the same way
  threw = false;
  try {
    generate_source(spec, config);
  } catch (const qjit::Error& e) {
    threw = e.stage() == "config";
  }
  CHECK(threw);
}

const std::vector<std::string> kDtypes = {"fp16", "bf16", "fp32", "mixed"};

}  // namespace

TEST_CASE("fused_ffn_types per dtype", "[codegen]") {
  auto t = fused_ffn_types("fp16");
  CHECK(std::string(t.x) == "qjit::half_t");
  CHECK(std::string(t.w) == "qjit::half_t");
  CHECK(std::string(t.y) == "qjit::half_t");
  CHECK((t.x_bytes == 2 && t.w_bytes == 2 && t.y_bytes == 2));
  t = fused_ffn_types("bf16");
  CHECK(std::string(t.w) == "qjit::bf16_t");
  CHECK((t.x_bytes == 2 && t.w_bytes == 2 && t.y_bytes == 2));
  t = fused_ffn_types("fp32");
  CHECK(std::string(t.x) == "float");
  CHECK((t.x_bytes == 4 && t.w_bytes == 4 && t.y_bytes == 4));
  t = fused_ffn_types("mixed");
  CHECK(std::string(t.x) == "float");
  CHECK(std::string(t.w) == "qjit::half_t");
  CHECK(std::string(t.y) == "float");
  CHECK((t.x_bytes == 4 && t.w_bytes == 2 && t.y_bytes == 4));
  CHECK_THROWS_AS(fused_ffn_types("fp8"), qjit::Error);
}

TEST_CASE("generate_source: every constant is a named constexpr with its value", "[codegen]") {
  struct Types {
    std::string x, w, y;
    int w_bytes;
  };
  const std::map<std::string, Types> types = {{"fp16", {"qjit::half_t", "qjit::half_t", "qjit::half_t", 2}},
                                              {"bf16", {"qjit::bf16_t", "qjit::bf16_t", "qjit::bf16_t", 2}},
                                              {"fp32", {"float", "float", "float", 4}},
                                              {"mixed", {"float", "qjit::half_t", "float", 2}}};
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const auto& op = find_op("fused_ffn");
  for (const auto& dt : kDtypes) {
    for (int iter = 0; iter < 6; ++iter) {
      const int64_t d = iter == 0 ? 4096 : 8 * (1 + rng() % 2000), h = 1 + rng() % 20000, m = 1 + rng() % 8;
      const OpSpec spec = ffn(d, h, m, dt);
      const auto space = kernel_space(op, spec);
      REQUIRE(!space.empty());
      std::vector<json> picks = {space[rng() % space.size()]};
      for (const auto& c : space)
        if (is_mma(c) != is_mma(picks[0])) {
          picks.push_back(c);
          break;
        }
      for (const json& config : picks) {
        INFO("spec " << spec.label() << " config " << config.dump());
        const auto src = generate_source(spec, config);
        const auto st = preamble_statements(src.text);
        const auto& T = types.at(dt);
        auto expect = [&](const std::string& name, const std::string& stmt) {
          INFO("constant " << name);
          REQUIRE(st.count(name) == 1);
          CHECK(st.at(name) == stmt);
        };
        expect("TX", "using TX = " + T.x + ";");
        expect("TW", "using TW = " + T.w + ";");
        expect("TY", "using TY = " + T.y + ";");
        expect("kD", "constexpr int kD = " + std::to_string(d) + ";");
        expect("kH", "constexpr int kH = " + std::to_string(h) + ";");
        expect("kM", "constexpr int kM = " + std::to_string(m) + ";");
        expect("kWarps", "constexpr int kWarps = " + config["warps"].dump() + ";");
        expect("kUnroll", "constexpr int kUnroll = " + config["unroll"].dump() + ";");
        expect("kSplitD", "constexpr int kSplitD = " + config["split_d"].dump() + ";");
        expect("Act", "using Act = qjit::SiluExpf;");  // act=silu (the default)
        if (is_mma(config)) {
          expect("kTiles", "constexpr int kTiles = " + config["tiles"].dump() + ";");
          CHECK(st.size() == 11);
          CHECK(src.template_path == "templates/fused_ffn/fused_ffn_mma.cu");
        } else {
          expect("kRowsPerWarp", "constexpr int kRowsPerWarp = " + config["rows_per_warp"].dump() + ";");
          expect("kVecElems",
                 "constexpr int kVecElems = " + std::to_string(config["vec_bytes"].get<int>() / T.w_bytes) + ";");
          CHECK(st.size() == 12);
          CHECK(src.template_path == "templates/fused_ffn/fused_ffn.cu");
        }

        // the header comment names op, spec and config, and says how to regenerate
        CHECK(src.text.find("// op:     fused_ffn\n") != std::string::npos);
        CHECK(src.text.find("// spec:   " + spec.canonical_json() + "\n") != std::string::npos);
        CHECK(src.text.find("// config: " + config.dump() + "\n") != std::string::npos);
        CHECK(src.text.find("qjit source --op fused_ffn --shape " + spec.shape_string() + " --config '" + config.dump() +
                            "'") != std::string::npos);
        CHECK(src.text.find("#include \"qjit/qjit_common.cuh\"") != std::string::npos);
        CHECK(src.file_name == "fused_ffn.cu");
        CHECK(src.kernel_name == "qjit_fused_ffn");
      }
    }
  }
}

TEST_CASE("generate_source: hand-checked fp16 decode preamble", "[codegen]") {
  const OpSpec spec = parse_spec("fused_ffn", "d=4096,h=11008");
  const auto src = generate_source(spec, cfg(8, 2, 16, 2, 4));
  const auto st = preamble_statements(src.text);
  CHECK(st.at("kD") == "constexpr int kD = 4096;");
  CHECK(st.at("kH") == "constexpr int kH = 11008;");
  CHECK(st.at("kM") == "constexpr int kM = 1;");
  CHECK(st.at("kVecElems") == "constexpr int kVecElems = 8;");
  CHECK(st.at("kSplitD") == "constexpr int kSplitD = 4;");
  CHECK(st.at("TX") == "using TX = qjit::half_t;");
  // the same spec/config always generates the same text (it enters the cache)
  CHECK(generate_source(spec, cfg(8, 2, 16, 2, 4)).text == src.text);
  CHECK(generate_source(spec, cfg(8, 2, 16, 2, 2)).text != src.text);
}

TEST_CASE("generate_source: the template follows the preamble line for line", "[codegen]") {
  const auto& op = find_op("fused_ffn");
  std::vector<std::pair<OpSpec, json>> cases;
  for (const char* shape : {"d=256,h=64", "d=256,h=64,m=3,dtype=bf16", "d=4096,h=64,m=8", "d=1000,h=7,dtype=mixed"}) {
    const OpSpec spec = parse_spec("fused_ffn", shape);
    cases.push_back({spec, op.default_config(spec)});
    std::set<std::string> families;  // one candidate per family too
    for (const auto& c : op.tunable_space(spec))
      if (families.insert(c.value("family", "simt")).second) cases.push_back({spec, c});
  }
  std::set<std::string> templates_seen;
  for (const auto& [spec, config] : cases) {
    INFO(spec.label() << " " << config.dump());
    const auto src = generate_source(spec, config);
    templates_seen.insert(src.template_path);
    CHECK(src.template_path == op.template_path(config));
    const auto text = lines_of(src.text);
    const auto tmpl = lines_of(embedded_template(src.template_path));
    REQUIRE(tmpl.size() > (is_cublas(config) ? 10u : 50u));
    REQUIRE(src.template_first_line > 10);
    REQUIRE(text.size() == src.template_first_line - 1 + tmpl.size());
    for (size_t i = 0; i < tmpl.size(); ++i) {
      INFO("template line " << i + 1);
      CHECK(text[src.template_first_line - 1 + i] == tmpl[i]);
      CHECK(src.origin_of_line(static_cast<int>(src.template_first_line + i)) ==
            src.template_path + ":" + std::to_string(i + 1));
    }
    for (int l = 1; l < src.template_first_line; ++l) CHECK(src.origin_of_line(l) == "generated preamble");
    // the line before the template names it
    CHECK(text[src.template_first_line - 2] == "// ---- " + src.template_path + " ----");
  }
  CHECK(templates_seen.count("templates/fused_ffn/fused_ffn.cu") == 1);
  // the common header is handed to NVRTC under its include name
  bool found = false;
  for (auto& [name, body] : nvrtc_headers()) found |= name == "qjit/qjit_common.cuh" && !body.empty();
  CHECK(found);
  CHECK_THROWS_AS(embedded_template("templates/nope.cu"), qjit::Error);
}

TEST_CASE("tunable_space: non-empty, legal, no duplicates, vectors divide d", "[codegen]") {
  const auto& op = find_op("fused_ffn");
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::vector<OpSpec> specs;
  for (const auto& dt : kDtypes)
    for (int64_t d : {1, 2, 3, 8, 1000, 4095, 4096, 4100, 11008})
      for (int64_t m : {1, 5, 8}) specs.push_back(ffn(d, 1 + rng() % 5000, m, dt));
  for (int i = 0; i < 40; ++i) specs.push_back(ffn(1 + rng() % 20000, 1 + rng() % 20000, 1 + rng() % 8, kDtypes[rng() % 4]));
  for (const auto& spec : specs) {
    INFO(spec.label());
    const auto t = fused_ffn_types(spec.get_str("dtype"));
    const auto space = op.tunable_space(spec);
    REQUIRE(!space.empty());
    std::set<std::string> seen;
    for (const auto& c : space) {
      INFO(c.dump());
      CHECK_NOTHROW(op.validate_config(spec, c));
      CHECK(seen.insert(c.dump()).second);
      if (is_cublas(c)) {
        CHECK(t.x_bytes == 2);  // cuBLAS multiplies x and W of one 16-bit type
        CHECK(t.w_bytes == 2);
        continue;
      }
      CHECK(c["warps"].get<int>() % c["split_d"].get<int>() == 0);
      if (is_mma(c)) {
        // tensor cores: 16-bit x and W, rows read as 16-byte vectors
        CHECK(t.x_bytes == 2);
        CHECK(t.w_bytes == 2);
        CHECK(spec.get_int("d") % 8 == 0);
      } else {
        const int vec = c["vec_bytes"].get<int>();
        CHECK(vec % t.w_bytes == 0);
        CHECK(spec.get_int("d") % (vec / t.w_bytes) == 0);
      }
    }
  }
}

TEST_CASE("tunable_space: vector widths follow the divisibility of d", "[codegen]") {
  const auto& op = find_op("fused_ffn");
  auto vecs = [&](const OpSpec& s) {
    std::set<int> v;
    for (auto& c : kernel_space(op, s))
      if (!is_mma(c)) v.insert(c["vec_bytes"].get<int>());
    return v;
  };
  CHECK(vecs(ffn(4095, 37, 1, "fp16")) == std::set<int>{2});
  CHECK(vecs(ffn(4095, 37, 1, "mixed")) == std::set<int>{2});
  CHECK(vecs(ffn(4095, 37, 1, "fp32")) == std::set<int>{4});
  CHECK(vecs(ffn(4100, 37, 1, "fp16")) == std::set<int>{4, 8});  // 4100 = 4 * 1025
  CHECK(vecs(ffn(4100, 37, 1, "fp32")) == std::set<int>{8, 16});
  CHECK(vecs(ffn(4096, 37, 1, "fp16")) == std::set<int>{8, 16});
  CHECK(vecs(ffn(4096, 37, 1, "bf16")) == std::set<int>{8, 16});
  CHECK(vecs(ffn(4098, 37, 1, "bf16")) == std::set<int>{2, 4});  // 4098 = 2 * 2049
  CHECK(vecs(ffn(1, 1, 1, "fp16")) == std::set<int>{2});
}

TEST_CASE("validate_config: illegal configs are refused with the reason", "[codegen]") {
  const OpSpec s = parse_spec("fused_ffn", "d=4096,h=64");
  CHECK_NOTHROW(find_op("fused_ffn").validate_config(s, cfg(4, 1, 16, 2, 1)));
  expect_config_error(s, cfg(2, 1, 16, 1, 4), "split_d must divide warps");
  expect_config_error(s, cfg(4, 1, 32, 1, 1), "vec_bytes");
  expect_config_error(s, cfg(4, 1, 3, 1, 1), "vec_bytes");
  expect_config_error(s, cfg(3, 1, 16, 1, 1), "warps");
  expect_config_error(s, cfg(4, 3, 16, 1, 1), "rows_per_warp");
  expect_config_error(s, cfg(4, 1, 16, 3, 1), "unroll");
  expect_config_error(s, cfg(4, 1, 16, 1, 3), "split_d");
  expect_config_error(s, cfg(4, 4, 16, 4, 1), "128 bytes");
  expect_config_error(parse_spec("fused_ffn", "d=4096,h=64,dtype=fp32"), cfg(4, 1, 2, 1, 1), "smaller than one");
  expect_config_error(parse_spec("fused_ffn", "d=4095,h=64"), cfg(4, 1, 16, 1, 1), "d=4095");
  json missing = cfg(4, 1, 16, 2, 1);
  missing.erase("unroll");
  expect_config_error(s, missing, "'unroll'");
  json wrong_type = cfg(4, 1, 16, 2, 1);
  wrong_type["warps"] = "4";
  expect_config_error(s, wrong_type, "'warps'");
  expect_config_error(s, json::array(), "fused_ffn config needs");
  json extra = cfg(4, 1, 16, 2, 1);
  extra["split"] = 2;  // a typo must not be ignored silently
  expect_config_error(s, extra, "split");
  json family = cfg(4, 1, 16, 2, 1);
  family["family"] = "wmma";
  expect_config_error(s, family, "wmma");
  // tensor-core configs need 16-bit x and W and d % 8 == 0
  json mma;
  for (auto& c : find_op("fused_ffn").tunable_space(parse_spec("fused_ffn", "d=4096,h=64,m=4")))
    if (is_mma(c)) mma = c;
  if (!mma.is_null()) {
    CHECK_NOTHROW(find_op("fused_ffn").validate_config(parse_spec("fused_ffn", "d=4096,h=64,m=4,dtype=bf16"), mma));
    expect_config_error(parse_spec("fused_ffn", "d=4096,h=64,m=4,dtype=fp32"), mma, "16-bit");
    expect_config_error(parse_spec("fused_ffn", "d=4096,h=64,m=4,dtype=mixed"), mma, "16-bit");
    expect_config_error(parse_spec("fused_ffn", "d=4092,h=64,m=4"), mma, "d % 8");
    json t3 = mma;
    t3["tiles"] = 3;
    expect_config_error(parse_spec("fused_ffn", "d=4096,h=64,m=4"), t3, "tiles");
  }
}

TEST_CASE("default_config is a member of the tunable space", "[codegen]") {
  const auto& op = find_op("fused_ffn");
  for (const auto& dt : kDtypes)
    for (int64_t d : {8, 4095, 4096, 11008})
      for (int64_t m = 1; m <= 8; ++m) {
        const OpSpec spec = ffn(d, 4096, m, dt);
        INFO(spec.label());
        const json def = op.default_config(spec);
        CHECK_NOTHROW(op.validate_config(spec, def));
        const auto space = op.tunable_space(spec);
        CHECK(std::find(space.begin(), space.end(), def) != space.end());
        // a CUDA-core default uses the widest legal vector
        if (!is_mma(def)) {
          int widest = 0;
          for (auto& c : kernel_space(op, spec))
            if (!is_mma(c)) widest = std::max(widest, c["vec_bytes"].get<int>());
          CHECK(def["vec_bytes"].get<int>() == widest);
        }
      }
}

TEST_CASE("launch_geometry: the grid covers every row of h exactly once", "[codegen]") {
  const auto& op = find_op("fused_ffn");
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (int iter = 0; iter < 60; ++iter) {
    const int64_t h = iter < 4 ? std::vector<int64_t>{1, 2, 37, 11008}[iter] : 1 + rng() % 100000;
    const OpSpec spec = ffn(4096, h, 1 + rng() % 8, kDtypes[rng() % 4]);
    for (const auto& c : kernel_space(op, spec)) {
      INFO(spec.label() << " " << c.dump());
      const auto g = qjit::test::geometry_of(op, spec, c);
      const int64_t rows = rows_per_block(c);
      CHECK(static_cast<int64_t>(g.grid[0]) * rows >= h);
      CHECK(static_cast<int64_t>(g.grid[0] - 1) * rows < h);
      CHECK(g.grid[1] == 1);
      CHECK(g.grid[2] == 1);
      CHECK(g.block[0] == 32u * c["warps"].get<unsigned>());
      CHECK(g.block[1] == 1);
      CHECK(g.block[2] == 1);
      CHECK(g.dynamic_smem == 0);
    }
  }
}

TEST_CASE("fused_ffn cublas family: two cuBLAS GEMMs into fp32 sums, then the SwiGLU kernel", "[codegen]") {
  const auto& op = find_op("fused_ffn");
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  // fp32 and mixed have no cuBLAS GEMM of one type for x and W.
  for (const char* dt : {"fp32", "mixed"}) {
    const OpSpec spec = ffn(4096, 11008, 1, dt);
    for (const auto& c : op.tunable_space(spec)) CHECK(!is_cublas(c));
    CHECK_THROWS_AS(op.validate_config(spec, json{{"family", "cublas"}, {"threads", 128}}), qjit::Error);
  }
  for (int iter = 0; iter < 20; ++iter) {
    const int64_t d = 1 + rng() % 9000, h = 1 + rng() % 20000, m = 1 + rng() % 8;
    const char* dt = iter % 2 ? "bf16" : "fp16";
    const OpSpec spec = ffn(d, h, m, dt);
    INFO(spec.label());
    std::vector<json> family;
    for (const auto& c : op.tunable_space(spec))
      if (is_cublas(c)) family.push_back(c);
    REQUIRE(family == std::vector<json>{{{"family", "cublas"}, {"threads", 128}}, {{"family", "cublas"}, {"threads", 256}}});
    for (const auto& c : family) {
      INFO(c.dump());
      const int threads = c["threads"].get<int>();
      const Plan plan = op.plan(spec, c);
      REQUIRE(plan.steps.size() == 3);
      const size_t sums = static_cast<size_t>(m * h) * 4;
      CHECK(plan.workspace_fixed == 2 * sums);
      for (int i = 0; i < 2; ++i) {  // h1 = x·W1ᵀ at 0, h3 = x·W3ᵀ after it
        const auto& s = plan.steps[i];
        REQUIRE(s.kind == PlanStep::Kind::cublas_gemm);
        CHECK(s.gemm.x == "x");
        CHECK(s.gemm.w == (i == 0 ? "w1" : "w3"));
        CHECK(s.gemm.to_sums);
        CHECK(s.gemm.sums_offset == (i == 0 ? 0 : sums));
        CHECK(s.gemm.rows.empty());
        CHECK(s.gemm.fixed_rows == m);
        CHECK((s.gemm.k == d && s.gemm.n == h));
        CHECK(s.gemm.bf16 == (std::string(dt) == "bf16"));
        CHECK(s.gemm.epilogue < 0);
      }
      REQUIRE(plan.steps[2].kind == PlanStep::Kind::kernel);
      const KernelDef& k = plan.kernels.at(static_cast<size_t>(plan.steps[2].kernel));
      CHECK(k.symbol == "qjit_fused_ffn_swiglu");
      REQUIRE(k.params.size() == 2);
      CHECK(qjit::test::is_workspace(k, 0));
      CHECK(k.params[0].offset == 0);
      CHECK(k.params[1].arg == "y");
      CHECK(k.geometry.block[0] == static_cast<unsigned>(threads));
      CHECK(int64_t{k.geometry.grid[0]} * threads >= m * h);           // every element of y
      CHECK(int64_t{k.geometry.grid[0] - 1} * threads < m * h);        // and no idle block
      const auto st = preamble_statements(generate_source(spec, c).text);
      CHECK(st.at("kH") == "constexpr int kH = " + std::to_string(h) + ";");
      CHECK(st.at("kM") == "constexpr int kM = " + std::to_string(m) + ";");
      CHECK(st.at("kThreads") == "constexpr int kThreads = " + std::to_string(threads) + ";");
      CHECK(st.at("TY") == std::string("using TY = ") + (iter % 2 ? "qjit::bf16_t;" : "qjit::half_t;"));
      CHECK(st.count("kD") == 0);  // d is cuBLAS's business
    }
    for (const json& bad : {json{{"family", "cublas"}, {"threads", 64}}, json{{"family", "cublas"}},
                            json{{"family", "cublas"}, {"threads", 128}, {"warps", 4}}})
      CHECK_THROWS_AS(op.validate_config(spec, bad), qjit::Error);
  }
}

TEST_CASE("traffic: bytes of W1, W3, x and y, and 4·m·h·d flops", "[codegen]") {
  const auto& op = find_op("fused_ffn");
  struct Case {
    std::string dtype;
    double x, w, y;
  };
  for (const Case& c : {Case{"fp16", 2, 2, 2}, Case{"bf16", 2, 2, 2}, Case{"fp32", 4, 4, 4}, Case{"mixed", 4, 2, 4}}) {
    for (auto [d, h, m] : {std::tuple<int64_t, int64_t, int64_t>{4096, 11008, 1}, {4095, 37, 8}, {1, 1, 3}}) {
      const OpSpec spec = ffn(d, h, m, c.dtype);
      INFO(spec.label());
      const auto t = op.traffic(spec);
      CHECK(t.bytes == 2.0 * h * d * c.w + double(m) * d * c.x + double(m) * h * c.y);
      CHECK(t.flops == 4.0 * m * h * d);
    }
  }
  // the decode shape by hand: 2 * 11008 * 4096 * 2 + 4096 * 2 + 11008 * 2
  CHECK(op.traffic(parse_spec("fused_ffn", "d=4096,h=11008")).bytes == 180355072.0 + 8192.0 + 22016.0);
}

TEST_CASE("generate_source inlines op-folder headers, and every line keeps its origin", "[codegen]") {
  // The wq kernels share templates/wq_gemm/wq_mma_mainloop.cuh, which itself
  // includes wq_dequant.cuh: `qjit source` must show both, once each, and
  // errors in them must name their own lines.
  const std::vector<std::string> headers = {"templates/wq_gemm/wq_mma_mainloop.cuh", "templates/wq_gemm/wq_dequant.cuh"};
  for (const auto& [op, shape] : {std::pair<const char*, const char*>{"wq_gemm", "k=4096,n=11008"},
                                  {"fused_ffn", "d=4096,h=11008,weights=native"}}) {
    const OpSpec spec = parse_spec(op, shape);
    const auto src = generate_source(spec, find_op(op).default_config(spec));
    INFO(src.template_path);
    const auto text = lines_of(src.text);
    std::map<std::string, int> lines_from;  // lines of each file in the output
    for (int line = src.template_first_line; line <= static_cast<int>(text.size()); ++line) {
      const std::string& l = text[line - 1];
      const std::string origin = src.origin_of_line(line);
      INFO("line " << line << ": " << l << " from " << origin);
      CHECK(l.rfind("#include \"qjit/wq_gemm/", 0) != 0);  // every op-header include is inlined
      if (origin == "generated preamble") {  // a marker between files
        CHECK(l.rfind("// ---- templates/", 0) == 0);
        continue;
      }
      const size_t colon = origin.rfind(':');
      const std::string path = origin.substr(0, colon);
      const auto file = lines_of(embedded_template(path));
      const int n = std::stoi(origin.substr(colon + 1));
      REQUIRE(n >= 1);
      REQUIRE(n <= static_cast<int>(file.size()));
      CHECK(l == (file[n - 1] == "#pragma once" ? "// #pragma once (inlined)" : file[n - 1]));
      ++lines_from[path];
    }
    // every line of the template and of each header but their includes, once
    auto expected = [](const std::string& path) {
      const auto file = lines_of(embedded_template(path));
      return static_cast<int>(std::count_if(file.begin(), file.end(), [](const std::string& l) {
        return l.rfind("#include \"qjit/wq_gemm/", 0) != 0;
      }));
    };
    for (const auto& h : headers) CHECK(lines_from[h] == expected(h));
    CHECK(lines_from[src.template_path] == expected(src.template_path));
  }
}
