// gru_quant on the CPU: rshift_round, the piecewise-linear LUTs (evaluation
// and fit), the params document, and the reference forward pass against a
// float64 GRU with the seed's (Haste) gate formula.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/error.h"
#include "codegen/ops/gru_params.h"
#include "codegen/ops/gru_quant.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/spec.h"
#include "tests/gru_helpers.h"
#include "tests/helpers.h"
#include "tuner/reference/gru_quant.h"

using namespace qjit::codegen::gru;
using qjit::tuner::GruWeights;
using json = nlohmann::json;

using qjit::test::error_of;

namespace {

QTensor qt(int bits, bool is_signed, int shift, int64_t zp = 0) { return {bits, is_signed, shift, zp}; }

// A params document with `bits`-wide activations and intermediates, 8-bit
// weights and 16-bit biases, scales that cover a realistic GRU's ranges, and
// zero points `zp` on x, h and the linear outputs.
json params_doc(int64_t C, int64_t H, int bits, int64_t zp = 0) {
  auto t = [](int b, bool s, int shift, int64_t z) { return json{{"bits", b}, {"signed", s}, {"shift", shift}, {"zp", z}}; };
  return {{"input_size", C},
          {"hidden_size", H},
          {"tensors",
           {{"x", t(bits, true, bits - 3, zp)},       // |x| < 4
            {"h", t(bits, true, bits - 1, zp / 2)},   // |h| < 1
            {"ih", t(bits, true, bits - 5, zp)},      // |W·x + b| < 16
            {"hh", t(bits, true, bits - 5, -zp)},
            {"u_in", t(bits, true, bits - 5, 0)},
            {"u_out", t(bits, false, bits, 0)},       // [0, 1)
            {"r_in", t(bits, true, bits - 5, 0)},
            {"r_out", t(bits, false, bits, 0)},
            {"n_in", t(bits, true, bits - 5, 0)},
            {"n_out", t(bits, true, bits - 1, 0)}}},  // (-1, 1)
          {"weights",
           {{"W", {{"bits", 8}, {"shift", 8}}},
            {"R", {{"bits", 8}, {"shift", {8, 8, 7}}}},
            {"bw", {{"bits", 16}, {"shift", 12}}},
            {"br", {{"bits", 16}, {"shift", 12}}}}}};
}

int32_t quantize(double v, const QTensor& t) {
  return static_cast<int32_t>(t.saturate(static_cast<int64_t>(std::nearbyint(std::ldexp(v, t.shift))) + t.zp));
}
double dequantize(int64_t q, const QTensor& t) { return std::ldexp(static_cast<double>(q - t.zp), -t.shift); }

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

TEST_CASE("gru rshift_round: ties to even on |x|, sign restored, negative shifts exact", "[gru]") {
  CHECK(rshift_round(5, 1) == 2);    // 2.5 -> 2
  CHECK(rshift_round(7, 1) == 4);    // 3.5 -> 4
  CHECK(rshift_round(-5, 1) == -2);
  CHECK(rshift_round(-7, 1) == -4);
  CHECK(rshift_round(6, 2) == 2);    // 1.5 -> 2
  CHECK(rshift_round(2, 2) == 0);    // 0.5 -> 0
  CHECK(rshift_round(-2, 2) == 0);
  CHECK(rshift_round(11, 2) == 3);   // 2.75
  CHECK(rshift_round(9, 2) == 2);    // 2.25
  CHECK(rshift_round(3, -2) == 12);
  CHECK(rshift_round(-3, -2) == -12);
  CHECK(rshift_round(-3, 0) == -3);
  CHECK(rshift_round(int64_t{1} << 62, 63) == 0);        // exactly one half
  CHECK(rshift_round((int64_t{1} << 62) + 1, 63) == 1);
  CHECK(rshift_round(INT64_MIN + 1, 64) == 0);
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 20000; ++i) {
    const int64_t x = static_cast<int64_t>(rng() >> 20) - (int64_t{1} << 43);
    const int n = static_cast<int>(rng() % 40) + 1;
    const long double q = std::fabs(static_cast<long double>(x)) / std::ldexp(1.0L, n);
    long double r = std::floor(q);
    if (q - r > 0.5L || (q - r == 0.5L && std::fmod(r, 2.0L) != 0)) r += 1;
    INFO(x << " >> " << n);
    CHECK(rshift_round(x, n) == static_cast<int64_t>(x < 0 ? -r : r));
  }
}

TEST_CASE("gru LUT: thresholds are exclusive, the ends extrapolate, input and output saturate", "[gru]") {
  Lut lut{"sigmoid", qt(8, true, 4, 3), qt(12, true, 7, 0), {}};
  // Segment i serves q_x < threshold_i; the last serves every q_x past the one before it.
  lut.segments = {{-10, 2, 1, 5}, {20, 8, 2, 100}, {40, 0, 0, 200}, {50, 4, 0, 250}};
  CHECK(eval_lut(lut, -11) == -14 + 5);     // round(2·(−14) / 2) + 5
  CHECK(eval_lut(lut, -128) == -131 + 5);   // extrapolated down to the end of the input range
  CHECK(eval_lut(lut, -500) == -131 + 5);   // the input saturates to −128 first
  CHECK(eval_lut(lut, -10) == -26 + 100);   // −10 is not < −10: segment 1, round(8·(−13) / 4) + 100
  CHECK(eval_lut(lut, 19) == 32 + 100);
  CHECK(eval_lut(lut, 20) == 200);
  CHECK(eval_lut(lut, 39) == 200);
  CHECK(eval_lut(lut, 40) == 4 * 37 + 250);   // the last segment
  CHECK(eval_lut(lut, 127) == 4 * 124 + 250); // extrapolated up to the end
  lut.segments.back().q_b = 40;
  CHECK(eval_lut(lut, 127) == 2047);          // the output saturates
  lut.segments.front().q_b = 200;
  CHECK(eval_lut(lut, -100) == -2048);
}

TEST_CASE("gru LUT fit: sigmoid and tanh within a few output LSBs over every input", "[gru]") {
  struct Case {
    std::string fn;
    QTensor in, out;
    int segments;
    int64_t max_lsb;
  };
  // Errors measured over every input of each range; the bound is what the fit reaches, kept as a regression bar.
  const std::vector<Case> cases = {
      {"sigmoid", qt(8, true, 4), qt(8, false, 8), 16, 1},
      {"tanh", qt(8, true, 5), qt(8, true, 7), 16, 1},
      {"sigmoid", qt(8, true, 3, -20), qt(8, false, 8, 3), 8, 2},
      {"sigmoid", qt(12, true, 8), qt(12, false, 12), 16, 10},
      {"tanh", qt(12, true, 9, 100), qt(12, true, 11), 16, 9},
      {"sigmoid", qt(12, true, 8), qt(12, false, 12), 64, 1},
      {"tanh", qt(16, true, 12), qt(16, true, 15), 32, 36},
      {"sigmoid", qt(4, true, 1), qt(4, false, 4), 8, 1},
  };
  for (const auto& c : cases) {
    const Lut lut = fit_lut(c.fn, c.in, c.out, c.segments);
    const LutError e = lut_error(lut);
    INFO(c.fn << " in " << c.in.bits << "-bit shift " << c.in.shift << " zp " << c.in.zp << ", out " << c.out.bits
              << "-bit, " << c.segments << " segments: max error " << e.max_lsb << " LSB at q_x = " << e.at);
    CHECK(lut.segments.size() <= static_cast<size_t>(c.segments));
    CHECK(e.max_lsb <= c.max_lsb);
    for (size_t i = 1; i < lut.segments.size(); ++i) CHECK(lut.segments[i].threshold > lut.segments[i - 1].threshold);
  }
}

TEST_CASE("gru params: a document round-trips; bad values are refused by name", "[gru]") {
  const json doc = params_doc(40, 24, 8, 5);
  const GruParams p = GruParams::from_json(doc);
  CHECK(p.W.shift.size() == 72);
  CHECK(p.R.shift[0] == 8);
  CHECK(p.R.shift[2 * 24] == 7);  // per gate: n's rows
  CHECK(p.u_lut.fn == "sigmoid");
  CHECK(p.n_lut.fn == "tanh");
  CHECK(p.u_lut.segments.size() <= 16);
  const json again = GruParams::from_json(p.to_json()).to_json();
  CHECK(again == p.to_json());
  CHECK(again.at("weights").at("R").at("shift") == json{8, 8, 7});

  struct Bad {
    std::string path, value, needle;
  };
  const std::vector<Bad> bad = {
      {"/tensors/x/zp", "200", "tensors.x.zp = 200 is outside its 8-bit signed range -128..127"},
      {"/tensors/u_out/zp", "-1", "tensors.u_out.zp = -1"},
      {"/tensors/h/bits", "17", "tensors.h.bits = 17 is outside 2..16"},
      {"/tensors/ih/shift", "33", "tensors.ih.shift = 33"},
      {"/tensors/u_out/shift", "-1", "tensors.u_out.shift = -1 must be >= 0"},
      {"/weights/W/bits", "9", "weights.W.bits = 9"},
      {"/weights/W/shift", "[1, 2]", "weights.W.shift must be a number, 3 numbers"},
      {"/weights/bw/shift", "-32", "bw in the GEMM's scale"},
      {"/tensors/ih/shift", "32", "W·x + bw rescaled to ih"},
      {"/input_size", "0", "params.input_size = 0"},
      {"/lut_segments", "65", "lut_segments = 65"},
      {"/luts", R"({"u": {"segments": [[5, 1, 0, 0], [5, 1, 0, 0]]}})", "thresholds must increase"},
      {"/luts", R"({"r": {"segments": [[5, 1, 99, 0]]}})", "out of range"},
  };
  for (const auto& b : bad) {
    json d = doc;
    d[json::json_pointer(b.path)] = json::parse(b.value);
    INFO(b.path << " = " << b.value);
    try {
      GruParams::from_json(d);
      FAIL("accepted");
    } catch (const qjit::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(b.needle));
    }
  }
}

TEST_CASE("gru reference: a 16-bit GRU tracks the float64 GRU of the seed's formula", "[gru]") {
  const int64_t C = 24, H = 20, T = 30, N = 3;
  for (int64_t zp : {0, 37}) {
    // 64 segments per LUT: the gate arithmetic, not the sigmoid/tanh fit, is under test here.
    json doc = params_doc(C, H, 16, zp);
    doc["lut_segments"] = 64;
    const GruParams p = GruParams::from_json(doc);
    const unsigned seed = std::random_device{}();
    INFO("seed " << seed << " zp " << zp);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> wdist(-0.35, 0.35), xdist(-1.5, 1.5), bdist(-0.5, 0.5);
    GruWeights w;
    std::vector<double> Wf(3 * H * C), Rf(3 * H * H), bwf(3 * H), brf(3 * H);
    // Quantize weights per row (then dequantize them: the float model uses the same weights).
    for (int64_t c = 0; c < 3 * H; ++c) {
      for (int64_t k = 0; k < C; ++k) {
        const int32_t q = static_cast<int32_t>(std::clamp<double>(std::nearbyint(std::ldexp(wdist(rng), p.W.shift[c])), -128, 127));
        w.W.push_back(q), Wf[c * C + k] = std::ldexp(q, -p.W.shift[c]);
      }
      for (int64_t k = 0; k < H; ++k) {
        const int32_t q = static_cast<int32_t>(std::clamp<double>(std::nearbyint(std::ldexp(wdist(rng), p.R.shift[c])), -128, 127));
        w.R.push_back(q), Rf[c * H + k] = std::ldexp(q, -p.R.shift[c]);
      }
      const int32_t qb = static_cast<int32_t>(std::nearbyint(std::ldexp(bdist(rng), p.bw.shift[c])));
      const int32_t qr = static_cast<int32_t>(std::nearbyint(std::ldexp(bdist(rng), p.br.shift[c])));
      w.bw.push_back(qb), w.br.push_back(qr);
      bwf[c] = std::ldexp(qb, -p.bw.shift[c]), brf[c] = std::ldexp(qr, -p.br.shift[c]);
    }
    // A smooth input signal, quantized; the float model reads the dequantized values.
    std::vector<int32_t> x(T * N * C), h0(N * H);
    std::vector<double> xf(T * N * C), hf(N * H);
    for (int64_t i = 0; i < T * N * C; ++i) {
      x[i] = quantize(1.2 * std::sin(0.3 * static_cast<double>(i / C) + 0.7 * static_cast<double>(i % C)) + 0.1 * xdist(rng), p.x);
      xf[i] = dequantize(x[i], p.x);
    }
    for (int64_t i = 0; i < N * H; ++i) h0[i] = quantize(0.5 * xdist(rng) / 1.5, p.h), hf[i] = dequantize(h0[i], p.h);

    const auto hq = qjit::tuner::gru_quant_reference(p, w, x, h0, T, N);
    double max_err = 0, sum_err = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        std::vector<double> next(H);
        for (int64_t j = 0; j < H; ++j) {
          double g[3] = {0, 0, 0}, rh_n = brf[2 * H + j];
          for (int gate = 0; gate < 3; ++gate) {
            const int64_t c = gate * H + j;
            double wx = bwf[c], rh = brf[c];
            for (int64_t k = 0; k < C; ++k) wx += Wf[c * C + k] * xf[(t * N + n) * C + k];
            for (int64_t k = 0; k < H; ++k) rh += Rf[c * H + k] * hf[n * H + k];
            if (gate < 2) g[gate] = wx + rh;
            else g[2] = wx, rh_n = rh;
          }
          const double u = sigmoid(g[0]), r = sigmoid(g[1]), nn = std::tanh(g[2] + r * rh_n);
          next[j] = u * hf[n * H + j] + (1 - u) * nn;
        }
        for (int64_t j = 0; j < H; ++j) {
          hf[n * H + j] = next[j];
          const double err = std::fabs(dequantize(hq[(t * N + n) * H + j], p.h) - next[j]);
          max_err = std::max(max_err, err), sum_err += err;
        }
      }
    const double mean_err = sum_err / static_cast<double>(T * N * H);
    INFO("max |error| " << max_err << ", mean " << mean_err);
    CHECK(max_err < 0.02);
    CHECK(mean_err < 0.003);
  }
}

TEST_CASE("gru reference: saturation at every saturated point, and the step's pieces by hand", "[gru]") {
  const GruParams p = GruParams::from_json(params_doc(40, 2, 8, 0));
  GruWeights w;
  w.W.assign(3 * 2 * 40, 127);  // every input weight at its maximum: W·x reaches 40 · 0.5 · 4 = 80 > ih's 16
  w.R.assign(3 * 2 * 2, 0);
  w.bw.assign(6, 0), w.br.assign(6, 0);
  const std::vector<int32_t> x_max(40, 127), x_min(40, -128), h = {50, -50};
  auto s = qjit::tuner::gru_quant_step(p, w, x_max.data(), h.data());
  for (auto v : s.ih) CHECK(v == p.ih.hi());  // W·x saturates ih
  for (auto v : s.u) CHECK(v == eval_lut(p.u_lut, p.u_in.hi()));
  for (auto v : s.hh) CHECK(v == 0);          // R = 0, br = 0, zp_hh = 0
  s = qjit::tuner::gru_quant_step(p, w, x_min.data(), h.data());
  for (auto v : s.ih) CHECK(v == p.ih.lo());
  // By hand for one unit: u, r, n from the LUTs, then h = rshift_round((u·(h − zp) + (2^8 − u)·(n_aligned)), 8).
  for (int j = 0; j < 2; ++j) {
    const int64_t n_aligned = rshift_round(s.n[j], p.n_out.shift - p.h.shift);  // zero points 0
    CHECK(s.h[j] == p.h.saturate(rshift_round(s.u[j] * h[j] + (256 - s.u[j]) * n_aligned, 8)));
  }
}

TEST_CASE("gru_quant spec: canonical params only, c and h must match, the step and cluster plans", "[gru]") {
  std::mt19937_64 rng(std::random_device{}());
  const json doc = qjit::test::random_gru_params(rng, 24, 37, 4, 16);
  const std::string canonical = qjit::codegen::gru::canonical_params(doc);
  const auto spec = qjit::codegen::make_spec("gru_quant", {{"t", 7}, {"n", 3}, {"c", 24}, {"h", 37}, {"params", canonical}});
  CHECK_THAT(error_of([&] { qjit::codegen::make_spec("gru_quant", {{"t", 7}, {"n", 3}, {"c", 24}, {"h", 37}, {"params", doc.dump()}}); }),
             Catch::Contains("not in canonical form"));
  CHECK_THAT(error_of([&] { qjit::codegen::make_spec("gru_quant", {{"t", 7}, {"n", 3}, {"c", 25}, {"h", 37}, {"params", canonical}}); }),
             Catch::Contains("the spec has c=25"));
  const auto& op = qjit::codegen::find_op("gru_quant");
  int step = 0, fused = 0, pre = 0;
  for (const auto& config : op.tunable_space(spec)) {
    INFO(config.dump());
    const auto plan = op.plan(spec, config);
    if (config["family"] == "step") {
      ++step;
      REQUIRE(plan.steps.size() == 2);
      CHECK(plan.steps[0].repeat == 1);
      CHECK(plan.steps[1].repeat == 7);  // one launch per time step
      CHECK(plan.kernels.at(static_cast<size_t>(plan.steps[1].kernel)).params.at(0).kind ==
            qjit::codegen::KernelParam::Kind::iteration);
      CHECK(plan.workspace_fixed == size_t{7 * 3 * 3 * 37 * 4});
      const auto g = plan.kernels[0].geometry;
      CHECK(g.grid[0] == 21u);
      CHECK(int64_t{g.grid[1]} * g.block[0] >= 3 * 37);
      continue;
    }
    // Cluster: one persistent launch (after the input projection for "pre").
    const int cs = config["cluster"], batch = config["batch"], warps = config["warps"];
    const bool is_fused = config["input"] == "fused";
    ++(is_fused ? fused : pre);
    REQUIRE(plan.steps.size() == (is_fused ? 1u : 2u));
    for (const auto& st : plan.steps) CHECK(st.repeat == 1);
    const auto& persistent = plan.kernels.at(static_cast<size_t>(plan.steps.back().kernel));
    CHECK(persistent.symbol == "qjit_gru_cluster");
    CHECK(persistent.geometry.grid[0] == static_cast<unsigned>(cs * ((3 + batch - 1) / batch)));
    CHECK(persistent.geometry.block[0] == static_cast<unsigned>(warps * 32));
    CHECK(persistent.geometry.dynamic_smem > 0);
    CHECK(persistent.geometry.dynamic_smem <= 227u * 1024);
    CHECK(persistent.geometry.cluster_non_portable == (cs > 8));
    CHECK(op.needs_sm90a(config));
    CHECK(plan.workspace_fixed == (is_fused ? 0u : size_t{7 * 3 * 3 * 37 * 4}));
    if (!is_fused) {
      const auto& g = plan.kernels.at(static_cast<size_t>(plan.steps[0].kernel)).geometry;
      CHECK(int64_t{g.grid[0]} * 64 >= 21);  // rows (t, n)
      CHECK(int64_t{g.grid[1]} * 64 >= 3 * 37);  // gate rows
    }
  }
  CHECK(step == 4);
  CHECK(fused > 0);
  CHECK(pre == fused);
  const auto src = qjit::codegen::generate_source(spec, op.default_config(spec));
  CHECK(src.text.find("struct ULut") != std::string::npos);
  CHECK(src.text.find("constexpr long long kQOne") != std::string::npos);
  CHECK_FALSE(src.needs_sm90a);

  // Illegal cluster configs are refused by what is wrong with them.
  const auto cluster = [](int cs, int batch, int warps, int ksplit) {
    return json{{"family", "cluster"}, {"cluster", cs}, {"batch", batch}, {"warps", warps}, {"ksplit", ksplit}, {"input", "fused"}};
  };
  CHECK_THAT(error_of([&] { op.validate_config(spec, cluster(3, 1, 4, 1)); }), Catch::Contains("cluster must be"));
  CHECK_THAT(error_of([&] { op.validate_config(spec, cluster(2, 4, 4, 1)); }), Catch::Contains("batch must be"));
  CHECK_THAT(error_of([&] { op.validate_config(spec, cluster(16, 1, 4, 1)); }), Catch::Contains("no hidden unit"));
  CHECK_THAT(error_of([&] { op.validate_config(spec, cluster(2, 1, 4, 3)); }), Catch::Contains("ksplit must be"));
  json bad_input = cluster(2, 1, 4, 1);
  bad_input["input"] = "later";
  CHECK_THAT(error_of([&] { op.validate_config(spec, bad_input); }), Catch::Contains("\"input\" must be"));
  // H = 2048 in a cluster of 2: 3·1024 rows of 2048 bytes do not fit a block's shared memory.
  const auto wide = qjit::codegen::make_spec(
      "gru_quant", {{"t", 2}, {"n", 1}, {"c", 8}, {"h", 2048},
                    {"params", qjit::codegen::gru::canonical_params(qjit::test::random_gru_params(rng, 8, 2048, 8, 8))}});
  CHECK_THAT(error_of([&] { op.validate_config(wide, cluster(2, 1, 4, 1)); }), Catch::Contains("bytes of shared memory"));
  for (const auto& config : op.tunable_space(wide))
    if (config["family"] == "cluster") CHECK(config["cluster"] == 16);
}

TEST_CASE("gru_quant: sources compile for sm_80 and sm_90 over random params", "[gru][nvrtc]") {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<qjit::test::CompileJob> jobs;
  // Every step config; of the cluster space (about 70 per spec) every 4th here, all exhaustively.
  const auto sample = qjit::test::compile_sample(1, "gru_quant cluster");
  for (const auto& [c, h, lo, hi] : std::vector<std::array<int, 4>>{{16, 32, 8, 8}, {39, 37, 4, 16}, {256, 256, 8, 8}}) {
    const auto spec = qjit::codegen::make_spec(
        "gru_quant", {{"t", 5}, {"n", 2}, {"c", c}, {"h", h},
                      {"params", qjit::codegen::gru::canonical_params(qjit::test::random_gru_params(rng, c, h, lo, hi))}});
    size_t i = 0;
    for (const auto& config : qjit::codegen::find_op("gru_quant").tunable_space(spec))
      if (config["family"] == "step" || sample.takes(i++)) jobs.push_back({spec, config});
  }
  // The step plan compiles for both; the cluster plan for compute capability 9.0 (sm_90a) only.
  std::vector<qjit::test::CompileJob> step_jobs;
  for (const auto& j : jobs)
    if (j.config["family"] == "step") step_jobs.push_back(j);
  qjit::test::compile_jobs(step_jobs, "sm_80", "gru_quant step sm_80");
  qjit::test::compile_jobs(jobs, "sm_90", "gru_quant sm_90");
  // The probe's build of the cluster plan (qjit_gru_probe: QJIT_GRU_CLOCKS marks) compiles too.
  for (const auto& j : jobs)
    if (j.config["family"] == "cluster") {
      auto src = qjit::codegen::generate_source(j.spec, j.config);
      src.text = "#define QJIT_GRU_CLOCKS 1\n" + src.text;
      const auto r = qjit::codegen::compile(src, "sm_90");
      INFO(r.log);
      CHECK(r.ok);
      CHECK(r.ptx.find("qjit_gru_clocks") != std::string::npos);
      break;
    }
  for (const auto* set : {&step_jobs, &jobs})
    for (const auto& j : *set) {
      INFO(j.spec.label().substr(0, 80) << " " << j.config.dump() << "\n" << j.error << j.result.log);
      REQUIRE(j.error.empty());
      CHECK(j.result.ok);
      if (j.config["family"] == "step") {
        CHECK(j.result.ptx.find(".entry qjit_gru_step") != std::string::npos);
        CHECK(j.result.ptx.find(".entry qjit_gru_input") != std::string::npos);
      } else {
        CHECK(j.result.ptx.find(".entry qjit_gru_cluster") != std::string::npos);
        CHECK(j.result.ptx.find(".entry qjit_gru_input_mma") != std::string::npos);
        CHECK(j.result.ptx.find("barrier.cluster") != std::string::npos);
        // No spills: the pairs' registers and the fragments stay in registers.
        CHECK(j.result.log.find(" 0 bytes spill stores") != std::string::npos);
      }
    }
}
