// fp_lut on the CPU: table construction, lookup semantics and edge cases,
// JSON, specs, generated source, NVRTC, and the lut tools/CLI.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/numeric.h"
#include "codegen/ops/fp_lut.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "tests/helpers.h"
#include "tuner/lut_tools.h"
#include "tuner/reference/fp_lut.h"

using namespace qjit;
namespace lut = qjit::codegen::lut;

namespace {
// cuts 0..10 and T[k] = k: the lookup then returns the (fractional) table
// position, so every expected value below is computed by hand.
lut::Table index_table() {
  std::array<float, 11> cuts{};
  std::array<uint16_t, 259> values{};
  for (int i = 0; i < 11; ++i) cuts[i] = static_cast<float>(i);
  for (int k = 0; k < 259; ++k) values[k] = float_to_half(static_cast<float>(k));
  return lut::from_values(cuts, values);
}
}  // namespace

TEST_CASE("table construction matches the seed's formula", "[fp_lut]") {
  const auto c = lut::seed_silu_cuts();
  const lut::Table t = lut::build("silu", c);
  auto f = [](double x) { return x / (1.0 + std::exp(-x)); };
  CHECK(t.values[0] == float_to_half(static_cast<float>(f(c[0]))));
  CHECK(t.values[1] == float_to_half(static_cast<float>(f(c[1]))));
  // interval 2, sample k = 5: c2 + 5 (c3 - c2) / 32
  CHECK(t.values[1 + 32 + 5] == float_to_half(static_cast<float>(f(c[2] + 5 * (double(c[3]) - c[2]) / 32))));
  CHECK(t.values[256] == float_to_half(static_cast<float>(f(c[8] + 31 * (double(c[9]) - c[8]) / 32))));
  CHECK(t.values[257] == float_to_half(static_cast<float>(f(c[9]))));
  CHECK(half_to_float(t.values[258]) == 65504.0f);  // silu(65504) = 65504, clamped to the fp16 range
  CHECK(t.scales[0] == static_cast<float>(1.0 / (double(c[1]) - c[0])));
  CHECK(t.scales[3] == static_cast<float>(32.0 / (double(c[4]) - c[3])));
  CHECK(t.scales[9] == static_cast<float>(1.0 / (65504.0 - c[9])));
  // exp(11.0859375) overflows nothing, exp's top entry is below 65504; exp beyond is clamped.
  CHECK(half_to_float(lut::build("exp", lut::default_cuts("exp")).values[258]) <= 65504.0f);
}

TEST_CASE("lookup: hand-computed positions, cut points, ends, NaN and infinities", "[fp_lut]") {
  const lut::Table t = index_table();
  using tuner::lut_apply;
  CHECK(lut_apply(t, 0.5f) == 0.5f);         // interval 0: T0 + 0.5 (T1 - T0)
  CHECK(lut_apply(t, 1.0f) == 1.0f);         // exactly c1: start of interval 1
  CHECK(lut_apply(t, 2.5f) == 49.0f);        // interval 2: p = 16 -> T[33 + 16]
  CHECK(lut_apply(t, 2.515625f) == 49.5f);   // p = 16.5
  CHECK(lut_apply(t, 1.984375f) == 32.5f);   // p = 31.5: j = 31, j+ = 32 (= T[33], start of interval 2)
  CHECK(lut_apply(t, 9.5f) == 257.5f);       // interval 9: one segment T[257]..T[258]
  CHECK(lut_apply(t, 10.0f) == 258.0f);      // x >= c10
  CHECK(lut_apply(t, 0.0f) == 0.0f);         // x <= c0
  CHECK(lut_apply(t, -5.0f) == 0.0f);        // clamped to c0
  CHECK(lut_apply(t, 1e6f) == 258.0f);       // clamped to c10
  CHECK(lut_apply(t, INFINITY) == 258.0f);
  CHECK(lut_apply(t, -INFINITY) == 0.0f);
  CHECK(std::isnan(lut_apply(t, NAN)));      // NaN in, NaN out
  // Inputs are rounded to fp16 first: 2.5 + 2^-12 is 2.5 in fp16.
  CHECK(lut_apply(t, 2.5f + 1.0f / 4096) == 49.0f);
  // sin/cos reduce modulo 2π: sin(x + 2π) looks up the same entry as sin(x) (up to fp32 rounding).
  const lut::Table s = lut::build("sin", lut::default_cuts("sin"));
  CHECK(std::fabs(lut_apply(s, 1.0f) - lut_apply(s, 1.0f + 6.28318530717958647692f)) < 2e-3f);
  CHECK(std::fabs(lut_apply(s, 1.0f) - std::sin(1.0f)) < 2e-3f);
  CHECK(std::isnan(lut_apply(s, INFINITY)));  // fmod(inf) is NaN
  // Output clamp: values of a table are fp16, so results stay within ±65504.
  CHECK(tuner::lut_apply(lut::build("exp", lut::default_cuts("exp")), 1e4f) <= 65504.0f);
}

TEST_CASE("reference bits per output type", "[fp_lut]") {
  const lut::Table t = index_table();
  const uint32_t x = float_to_half(2.515625f);
  CHECK(tuner::lut_reference_bits(t, "fp16", "fp16", x) == float_to_half(49.5f));
  CHECK(tuner::lut_reference_bits(t, "fp16", "bf16", x) == float_to_bf16(49.5f));
  CHECK(tuner::lut_reference_bits(t, "fp16", "fp32", x) == float_to_bits(49.5f));
  CHECK(tuner::lut_reference_bits(t, "fp32", "fp32", float_to_bits(2.515625f)) == float_to_bits(49.5f));
  CHECK(tuner::lut_reference_bits(t, "bf16", "fp32", float_to_bf16(2.5f)) == float_to_bits(49.0f));
}

TEST_CASE("table JSON round trip and validation", "[fp_lut]") {
  for (const auto& fn : lut::function_names()) {
    const lut::Table t = lut::build(fn, lut::default_cuts(fn));
    const lut::Table back = lut::from_json(lut::to_json(t));
    CHECK(back.cuts == t.cuts);
    CHECK(back.values == t.values);
    CHECK(back.fn == fn);
    nlohmann::json by_fn = {{"fn", fn}, {"cuts", t.cuts}};
    CHECK(lut::from_json(by_fn).values == t.values);
  }
  nlohmann::json bad = {{"fn", "silu"}, {"cuts", {1, 2, 3}}};
  CHECK_THROWS_WITH(lut::from_json(bad), Catch::Contains("11 numbers"));
  auto cuts = lut::default_cuts("tanh");
  cuts[4] = cuts[3];
  CHECK_THROWS_WITH(lut::build("tanh", cuts), Catch::Contains("must increase"));
  cuts = lut::default_cuts("tanh");
  cuts[2] = 0.1f;  // not an fp16 value
  CHECK_THROWS_WITH(lut::build("tanh", cuts), Catch::Contains("not a finite fp16 value"));
  CHECK_THROWS_WITH(lut::reference_fn("relu6", 1.0), Catch::Contains("relu6"));
}

TEST_CASE("fp_lut specs: defaults, seed cuts, custom tables, errors naming the value", "[fp_lut][spec]") {
  auto s = codegen::parse_spec("fp_lut", "n=1000,fn=silu");
  CHECK(s.get_str("cuts") == "default");
  CHECK(s.get_str("in") == "fp16");
  CHECK(codegen::lut_table_of(codegen::parse_spec("fp_lut", "n=10,fn=silu,cuts=seed")).cuts == lut::seed_silu_cuts());
  CHECK_THROWS_WITH(codegen::parse_spec("fp_lut", "n=10,fn=gelu,cuts=seed"), Catch::Contains("seed"));
  CHECK_THROWS_WITH(codegen::parse_spec("fp_lut", "n=10,fn=custom"), Catch::Contains("custom"));
  CHECK_THROWS_WITH(codegen::parse_spec("fp_lut", "n=10,fn=silu,cuts=zz"), Catch::Contains("zz"));
  CHECK_THROWS_WITH(codegen::parse_spec("fp_lut", "n=0,fn=silu"), Catch::Contains("n=0"));
  CHECK_THROWS_WITH(codegen::parse_spec("fp_lut", "n=10,fn=silu,out=int8"), Catch::Contains("int8"));
  // A custom table given as hex: cut points 0..10, values = index.
  const lut::Table idx = index_table();
  std::array<uint16_t, 11> cut_bits{};
  for (int i = 0; i < 11; ++i) cut_bits[i] = float_to_half(idx.cuts[i]);
  nlohmann::json p = {{"n", 5},
                      {"fn", "custom"},
                      {"cuts", lut::encode_halves(cut_bits.data(), 11)},
                      {"values", lut::encode_halves(idx.values.data(), 259)}};
  const auto custom = codegen::make_spec("fp_lut", p);
  CHECK(codegen::lut_table_of(custom).values == idx.values);
}

TEST_CASE("fp_lut generated source bakes the table; every candidate compiles", "[fp_lut][nvrtc]") {
  auto spec = codegen::parse_spec("fp_lut", "n=1000003,fn=gelu,in=bf16,out=fp32");
  const auto& op = codegen::find_op("fp_lut");
  auto src = codegen::generate_source(spec, op.default_config(spec));
  const lut::Table t = codegen::lut_table_of(spec);
  CHECK_THAT(src.text, Catch::Contains("struct Lut {"));
  CHECK_THAT(src.text, Catch::Contains("constexpr long long kN = 1000003;"));
  CHECK_THAT(src.text, Catch::Contains("using TIn = qjit::bf16_t;"));
  char entry[16];
  std::snprintf(entry, sizeof entry, "0x%04x", t.values[100]);
  CHECK_THAT(src.text, Catch::Contains(entry));
  // Every candidate of an interpolate-only spec (fp32 output) and of one with
  // the direct strategy (16-bit output, sin's angle reduction), both archs.
  const auto direct_spec = codegen::parse_spec("fp_lut", "n=1000003,fn=sin,in=fp32,out=bf16");
  int direct = 0;
  for (const auto& s : {spec, direct_spec}) {
    const auto space = op.tunable_space(s);
    REQUIRE(space.size() >= 20);
    for (size_t i = 0; i < space.size(); ++i) {
      direct += space[i]["table"] == "direct";
      auto r = codegen::compile(codegen::generate_source(s, space[i]), i % 2 ? "sm_80" : "sm_90");
      INFO(space[i].dump() << "\n" << r.log);
      CHECK(r.ok);
      CHECK(r.spill_bytes == 0);
    }
  }
  CHECK(direct > 0);
  CHECK_THROWS_WITH(op.validate_config(spec, {{"threads", 256}, {"vec_bytes", 16}, {"items", 2}, {"table", "direct"},
                                              {"blocks_per_sm", 1}}),
                    Catch::Contains("16-bit outputs"));
  CHECK(test::geometry_of(op, direct_spec, op.default_config(direct_spec)).dynamic_smem == 131072);
  // Each function and the LUT SiLU variant of fused_ffn compile too.
  for (const auto& fn : lut::function_names()) {
    auto s = codegen::parse_spec("fp_lut", "n=77,fn=" + fn);
    CHECK(codegen::compile(codegen::generate_source(s, op.default_config(s)), "sm_90").ok);
  }
  for (std::string act : {"silu_lut", "silu_lut_seed"}) {
    auto f = codegen::parse_spec("fused_ffn", "d=256,h=64,m=4,act=" + act);
    auto fs = codegen::generate_source(f, codegen::find_op("fused_ffn").default_config(f));
    CHECK_THAT(fs.text, Catch::Contains("using Act = qjit::LutActivation<Lut>;"));
    CHECK(codegen::compile(fs, "sm_90").ok);
  }
}

TEST_CASE("lut tools: fitted SiLU beats the seed's cut points; fit never worsens; PNG", "[fp_lut][lut]") {
  const auto seed = tuner::lut_error(lut::build("silu", lut::seed_silu_cuts()));
  const auto fitted = tuner::lut_error(lut::build("silu", lut::default_cuts("silu")));
  CHECK(seed.inputs == 63488);  // every finite fp16 value
  CHECK(fitted.max_abs_small < seed.max_abs_small);
  CHECK(fitted.max_abs < seed.max_abs);  // lower max abs error over all fp16 inputs than the seed's table
  CHECK(fitted.max_rel <= 1.25 * seed.max_rel);
  tuner::FitOptions opt;
  opt.seconds = 2;
  const auto start = lut::default_cuts("tanh");
  const auto before = tuner::lut_error(lut::build("tanh", start));
  const auto after = tuner::lut_error(tuner::fit_cuts("tanh", start, opt));
  CHECK(after.max_abs_small <= before.max_abs_small);
  test::TempDir dir;
  tuner::write_error_png(dir.file("e.png"), {lut::build("silu", lut::default_cuts("silu"))},
                         -20, 12, 200, 80);
  std::ifstream png(dir.file("e.png"), std::ios::binary);
  char sig[8] = {};
  png.read(sig, 8);
  CHECK(std::string(sig + 1, 3) == "PNG");
  png.seekg(0, std::ios::end);
  CHECK(png.tellg() > 200 * 80 * 3);  // stored (uncompressed) RGB
}

TEST_CASE("qjit lut CLI", "[fp_lut][cli]") {
  test::TempDir dir;
  const std::string db = dir.file("k.db");
  auto r = test::run_qjit("lut report --fn silu,cos --json", db);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.size() == 3);  // silu (qjit), silu (seed cuts), cos
  CHECK(j[0]["max_abs_small"].get<double>() < j[1]["max_abs_small"].get<double>());
  r = test::run_qjit("lut table --fn silu --cuts seed", db);
  REQUIRE(r.exit_code == 0);
  auto t = nlohmann::json::parse(r.out);
  CHECK(t["cuts"].size() == 11);
  CHECK(t["values"].size() == 259);
  std::ofstream(dir.file("t.json")) << r.out;
  r = test::run_qjit("lut report --table '" + dir.file("t.json") + "' --png '" + dir.file("p.png") + "'", db);
  CHECK(r.exit_code == 0);
  CHECK(std::filesystem::exists(dir.file("p.png")));
  r = test::run_qjit("lut fit --fn nope --seconds 1", db);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("nope"));
  r = test::run_qjit("lut fit --fn sigmoid --metric max --seconds 1", db);
  CHECK(r.exit_code == 2);
  r = test::run_qjit("lut fit --fn tanh --seconds 2 -o '" + dir.file("fit.json") + "'", db);
  CHECK(r.exit_code == 0);
  CHECK(lut::from_json(nlohmann::json::parse(std::ifstream(dir.file("fit.json")))).fn == "tanh");
  r = test::run_qjit("source --op fp_lut --shape n=4097,fn=sin,out=bf16", db);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("kReduceAngle = true"));
}
