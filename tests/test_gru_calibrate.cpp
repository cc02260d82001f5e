// gru_quant calibration on the CPU: PyTorch's gate order to the seed's, the
// float64 GRU by hand, the seed's EMA and scale choices, the int32 rule's
// adjustments, the accuracy of a calibrated INT8 and INT16 GRU against the
// float64 GRU (the op's accuracy targets), and `qjit gru` end to end.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codegen/error.h"
#include "codegen/ops/gru_params.h"
#include "io/tensor_file.h"
#include "tests/helpers.h"
#include "tuner/gru_calibrate.h"
#include "tuner/gru_float.h"
#include "tuner/reference/gru_quant.h"

using namespace qjit::tuner;
using qjit::codegen::gru::GruParams;
using qjit::codegen::gru::QTensor;

namespace {

// PyTorch's default init (uniform in ±1/sqrt(H)) and a smooth input: per
// sequence and channel a sum of three sines of random amplitude, frequency
// and phase. Seeded, so the accuracy numbers are reproducible.
struct RealisticCase {
  GruFloatWeights w;
  int64_t T = 50, N = 2;
  std::vector<double> x_calibrate, x_evaluate;  // two draws of the same kind of signal
};

RealisticCase realistic_case(int64_t C, int64_t H, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * std::ldexp(static_cast<double>(rng() >> 11), -53); };
  RealisticCase c;
  c.w.input_size = C, c.w.hidden_size = H;
  const double k = 1 / std::sqrt(static_cast<double>(H));
  const std::pair<std::vector<double>*, int64_t> tensors[] = {
      {&c.w.weight_ih, 3 * H * C}, {&c.w.weight_hh, 3 * H * H}, {&c.w.bias_ih, 3 * H}, {&c.w.bias_hh, 3 * H}};
  for (const auto& [v, size] : tensors)
    for (int64_t i = 0; i < size; ++i) v->push_back(uniform(-k, k));
  for (auto* x : {&c.x_calibrate, &c.x_evaluate}) {
    x->assign(static_cast<size_t>(c.T * c.N * C), 0.0);
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int s = 0; s < 3; ++s) {
          const double amp = uniform(0.2, 0.6), freq = uniform(0.05, 0.5), phase = uniform(0, 6.283185307179586);
          for (int64_t t = 0; t < c.T; ++t)
            (*x)[(t * c.N + n) * C + ch] += amp * std::sin(freq * static_cast<double>(t) + phase);
        }
  }
  return c;
}

// Calibrates on one draw, runs the integer reference on the other, and
// compares its dequantized output with the float64 GRU's.
Accuracy quantized_accuracy(const RealisticCase& c, const GruQuantConfig& cfg) {
  const GruCalibration cal = calibrate(c.w, c.x_calibrate, {}, c.T, c.N, cfg);
  const GruParams p = GruParams::from_json(cal.params);
  const std::vector<int32_t> x = quantize(c.x_evaluate, p.x);
  const std::vector<int32_t> h0(static_cast<size_t>(c.N * c.w.hidden_size), quantize(0.0, p.h));
  const auto hq = gru_quant_reference(p, cal.weights, x, h0, c.T, c.N);
  return compare(dequantize(hq, p.h), gru_float_forward(c.w, c.x_evaluate, {}, c.T, c.N));
}

}  // namespace

TEST_CASE("gru calibrate: PyTorch's gate blocks (r, z, n) become the seed's (u = z, r, n)", "[gru]") {
  const int64_t H = 3, cols = 2;
  std::vector<double> m;
  for (int block = 0; block < 3; ++block)  // value = 100·block + 10·row + col
    for (int64_t row = 0; row < H; ++row)
      for (int64_t col = 0; col < cols; ++col) m.push_back(100.0 * block + 10.0 * static_cast<double>(row) + static_cast<double>(col));
  const auto s = torch_to_seed_gates(m, H, cols);
  const int torch_block_of[3] = {1, 0, 2};  // u ← z, r ← r, n ← n
  for (int g = 0; g < 3; ++g)
    for (int64_t row = 0; row < H; ++row)
      for (int64_t col = 0; col < cols; ++col)
        CHECK(s[(g * H + row) * cols + col] == 100.0 * torch_block_of[g] + 10.0 * static_cast<double>(row) + static_cast<double>(col));
  const auto b = torch_to_seed_gates({1, 2, 3, 4, 5, 6}, 2, 1);  // a [3H] vector
  CHECK(b == std::vector<double>{3, 4, 1, 2, 5, 6});
  CHECK_THROWS_WITH(torch_to_seed_gates({1, 2, 3, 4}, 2, 1), Catch::Contains("expected 3·2·1"));
}

TEST_CASE("gru calibrate: the float64 GRU by hand (C = H = 1, two steps)", "[gru]") {
  // r = σ(ln 3) = 3/4 and z = σ(−ln 3) = 1/4 from the biases: swapping the
  // blocks would swap them. b_hn = 0.5 sits inside r ⊙ (·).
  GruFloatWeights w;
  w.input_size = 1, w.hidden_size = 1;
  w.weight_ih = {0, 0, 1};  // (r, z, n)
  w.weight_hh = {0, 0, 2};
  w.bias_ih = {std::log(3.0), -std::log(3.0), 0};
  w.bias_hh = {0, 0, 0.5};
  std::vector<GruFloatStep> steps;
  std::vector<double> h_prev;  // (the step's h_prev points into the forward's own state)
  const auto h = gru_float_forward(w, {1.0, 0.0}, {0.5}, 2, 1, [&](const GruFloatStep& s) {
    steps.push_back(s);
    h_prev.push_back(s.h_prev[0]);
  });
  const double n1 = std::tanh(1 + 0.75 * (2 * 0.5 + 0.5)), h1 = 0.75 * n1 + 0.25 * 0.5;
  const double n2 = std::tanh(0 + 0.75 * (2 * h1 + 0.5)), h2 = 0.75 * n2 + 0.25 * h1;
  REQUIRE(h.size() == 2);
  CHECK(h[0] == Approx(h1).epsilon(1e-14));
  CHECK(h[1] == Approx(h2).epsilon(1e-14));
  REQUIRE(steps.size() == 2);
  // The observer names tensors as the seed does: u = z first.
  CHECK(steps[0].u_out[0] == Approx(0.25).epsilon(1e-14));
  CHECK(steps[0].r_out[0] == Approx(0.75).epsilon(1e-14));
  CHECK(steps[0].ih == std::vector<double>{-std::log(3.0), std::log(3.0), 1.0});
  CHECK(steps[0].hh == std::vector<double>{0.0, 0.0, 2 * 0.5 + 0.5});
  CHECK(steps[0].n_in[0] == Approx(1 + 0.75 * 1.5).epsilon(1e-14));
  CHECK(h_prev == std::vector<double>{0.5, h[0]});
  CHECK_THROWS_WITH(gru_float_forward(w, {1.0, 0.0, 3.0}, {}, 2, 1), Catch::Contains("x has 3 values; expected T·N·C = 2"));
}

TEST_CASE("gru calibrate: the seed's EMA, power-of-two scales, zero points, rounding", "[gru]") {
  EmaRange r;
  r.add_step(-1, 1);  // the first step sets the range
  CHECK((r.min == -1 && r.max == 1));
  r.add_step(-2, 3);  // then 0.9·old + 0.1·step
  CHECK(r.min == Approx(-1.1));
  CHECK(r.max == Approx(1.2));

  // [-1, 1] in 8 signed bits: 255 steps of 2^-6 (2^-7 would need 256), covering 3.98 of which 2 are
  // used: the seed puts min at the lowest code (covers [-1, 2.98]); centred spreads the slack ([-2, 1.98]).
  QTensor t = choose_asymmetric(-1, 1, 8, true, ZeroPoint::seed);
  CHECK((t.shift == 6 && t.zp == -128 + 64));
  t = choose_asymmetric(-1, 1, 8, true, ZeroPoint::centred);
  CHECK((t.shift == 6 && t.zp == 0));  // -128 + round_half_even(127.5)
  t = choose_asymmetric(-0.25, 0.5, 8, true, ZeroPoint::centred);
  CHECK((t.shift == 8 && t.zp == -32));  // low = (0.25 - 255/256) / 2: codes cover [-0.375, 0.621]
  // A sigmoid's [0.02, 0.99] unsigned: widened to hold 0, 255/0.99 → shift 8, zp 0 either way.
  for (auto placement : {ZeroPoint::seed, ZeroPoint::centred}) {
    t = choose_asymmetric(0.02, 0.99, 8, false, placement);
    CHECK((t.shift == 8 && t.zp == 0));
    // A range above zero still holds 0 (the zero point stays a code), at the lowest code.
    t = choose_asymmetric(2, 3, 8, true, placement);
    CHECK((t.shift == 6 && t.zp == -128));
  }
  CHECK(choose_asymmetric(-1, 1, 8, true, ZeroPoint::centred, 3).shift == 3);  // a cap from the int32 rule
  CHECK(choose_asymmetric(0, 0, 8, true, ZeroPoint::centred).shift == 7);      // never seen: as [0, 1]
  // Symmetric: round(max_abs · 2^shift) <= 127.
  CHECK(choose_symmetric_shift(0.125, 8) == 9);
  CHECK(choose_symmetric_shift(1.0, 8) == 6);
  CHECK(choose_symmetric_shift(127.0 / 128, 8) == 7);
  CHECK(choose_symmetric_shift(0.0, 8) == 6);

  // Round half to even, then the zero point, then saturation.
  const QTensor s8{8, true, 0, 0};
  CHECK(quantize(2.5, s8) == 2);
  CHECK(quantize(3.5, s8) == 4);
  CHECK(quantize(-2.5, s8) == -2);
  CHECK(quantize(1e300, s8) == 127);
  CHECK(quantize(-1e300, s8) == -128);
  const QTensor u8{8, false, 1, 10};
  CHECK(quantize(0.25, u8) == 10);  // 0.5 → 0
  CHECK(quantize(0.75, u8) == 12);  // 1.5 → 2
  CHECK(dequantize(12, u8) == 1.0);
  CHECK_THROWS_WITH(quantize(std::nan(""), u8), Catch::Contains("NaN"));

  const Accuracy a = compare({1, 2, 3}, {1, 2, 5});
  CHECK(a.mse == Approx(4.0 / 3));
  CHECK(a.mae == Approx(2.0 / 3));
  CHECK(a.max_abs == 2);
  CHECK(a.cosine == Approx(20 / std::sqrt(14.0 * 30)));
}

TEST_CASE("gru calibrate: a realistic GRU, INT8 and INT16, against the float64 GRU", "[gru]") {
  struct Shape {
    int64_t C, H;
    uint64_t seed;
  };
  for (const Shape& s : {Shape{48, 64, 46}, Shape{32, 32, 2}, Shape{64, 64, 3}}) {
    const RealisticCase c = realistic_case(s.C, s.H, s.seed);
    const std::string label = "C=" + std::to_string(s.C) + " H=" + std::to_string(s.H) + " seed " +
                              std::to_string(s.seed) + " (T=50, N=2, held-out input)";
    INFO(label);
    const Accuracy a8 = quantized_accuracy(c, {8, 8, 16, true, ZeroPoint::centred});
    const Accuracy a16 = quantized_accuracy(c, {16, 8, 16, true, ZeroPoint::centred});
    std::printf("[gru] calibrated %s: INT8 MSE %.3g MAE %.3g max %.3g cosine %.6f; INT16 MSE %.3g MAE %.3g max %.3g cosine %.6f\n",
                label.c_str(), a8.mse, a8.mae, a8.max_abs, a8.cosine, a16.mse, a16.mae, a16.max_abs, a16.cosine);
    CHECK(a8.mse < 1e-3);
    CHECK(a8.mae < 0.05);
    CHECK(a8.cosine > 0.999);
    CHECK(a16.mse < 1e-4);
    CHECK(a16.mae < 0.015);
  }
}

TEST_CASE("gru calibrate: centred zero points beat the seed's on EMA ranges", "[gru]") {
  // The seed's zp = round(−min / scale) puts a power-of-two scale's slack
  // above max; the EMA's min lies above the lowest values the data reaches,
  // so the seed's placement clips the lower tail of x, h, ih, hh and the
  // gate inputs. Centred keeps the same scales and halves the slack between
  // the two ends.
  const RealisticCase c = realistic_case(32, 32, 2);
  for (int bits : {8, 16}) {
    const Accuracy seed = quantized_accuracy(c, {bits, 8, 16, true, ZeroPoint::seed});
    const Accuracy centred = quantized_accuracy(c, {bits, 8, 16, true, ZeroPoint::centred});
    std::printf("[gru] INT%d zero points, seed's vs centred: MSE %.3g vs %.3g, max %.3g vs %.3g\n", bits, seed.mse,
                centred.mse, seed.max_abs, centred.max_abs);
    CHECK(centred.mse < seed.mse / 2);
    CHECK(centred.max_abs < seed.max_abs);
  }
}

TEST_CASE("gru calibrate: the document passes the int32 rule, scales coarsened where it would not", "[gru]") {
  const RealisticCase c = realistic_case(32, 32, 7);
  const GruRanges ranges = track_ranges(c.w, c.x_calibrate, {}, c.T, c.N);
  const GruQuantConfig cfg{16, 8, 16, true, ZeroPoint::centred};
  const GruCalibration plain = quantize_gru(c.w, ranges, cfg);
  CHECK(plain.adjustments.empty());
  const GruParams p = GruParams::from_json(plain.params);
  // Biases sit at their GEMM's scale; weights are per channel and within their bits.
  for (size_t ch = 0; ch < p.W.shift.size(); ++ch) {
    CHECK(p.bw.shift[ch] == p.W.shift[ch] + p.x.shift);
    CHECK(p.br.shift[ch] == p.R.shift[ch] + p.h.shift);
  }
  CHECK(p.u_out.is_signed == false);
  CHECK(p.n_out.zp == 0);

  SECTION("a linear output far finer than its GEMM sum") {
    GruRanges tiny = ranges;
    tiny.ih = EmaRange{-1e-4, 1e-4, 1};
    const GruCalibration cal = quantize_gru(c.w, tiny, cfg);
    REQUIRE_FALSE(cal.adjustments.empty());
    CHECK(cal.adjustments[0].rfind("ih shift ", 0) == 0);
    CHECK_NOTHROW(GruParams::from_json(cal.params));
  }
  SECTION("a bias too large for int32 at its GEMM's scale") {
    GruFloatWeights w = c.w;
    w.bias_ih[32] = 3000;  // PyTorch's z block: the seed's channel 0
    const GruCalibration cal = quantize_gru(w, ranges, cfg);
    REQUIRE_FALSE(cal.adjustments.empty());
    CHECK(cal.adjustments[0].rfind("W[0] shift ", 0) == 0);
    const GruParams q = GruParams::from_json(cal.params);
    CHECK(dequantize(cal.weights.bw[0], QTensor{32, true, q.bw.shift[0], 0}) == Approx(3000).epsilon(1e-6));
  }
}

// ---- the qjit gru command, end to end through the built binary ---------------

namespace {

namespace io = qjit::io;

io::Tensor float_tensor(io::DType dtype, std::vector<int64_t> shape, const std::vector<double>& v) {
  io::Tensor t{dtype, std::move(shape), {}};
  for (double d : v) {
    if (dtype == io::DType::f64) t.bytes.append(reinterpret_cast<const char*>(&d), 8);
    else {
      const float f = static_cast<float>(d);
      t.bytes.append(reinterpret_cast<const char*>(&f), 4);
    }
  }
  return t;
}

template <class T>
std::vector<T> values_of(const io::Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.elements()));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

// A torch.nn.GRU state dict as PyTorch names it, under `prefix`.
std::map<std::string, io::Tensor> state_dict(const GruFloatWeights& w, const std::string& prefix) {
  const int64_t C = w.input_size, H = w.hidden_size;
  return {{prefix + "weight_ih_l0", float_tensor(io::DType::f32, {3 * H, C}, w.weight_ih)},
          {prefix + "weight_hh_l0", float_tensor(io::DType::f32, {3 * H, H}, w.weight_hh)},
          {prefix + "bias_ih_l0", float_tensor(io::DType::f32, {3 * H}, w.bias_ih)},
          {prefix + "bias_hh_l0", float_tensor(io::DType::f32, {3 * H}, w.bias_hh)}};
}

// The float32 values a file round trip leaves.
std::vector<double> as_float32(std::vector<double> v) {
  for (double& d : v) d = static_cast<float>(d);
  return v;
}

// Without a GPU on every machine (CUDA_VISIBLE_DEVICES=""), so the GPU-free paths are what runs.
qjit::test::CommandResult qjit_gru(const std::string& args, const qjit::test::TempDir& dir) {
  return qjit::test::run_qjit_env("CUDA_VISIBLE_DEVICES=", "gru " + args, dir.file("kernels.db"));
}

std::string describe(const qjit::test::CommandResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out.substr(0, 3000) + "\n--- stderr ---\n" +
         r.err.substr(0, 3000);
}

}  // namespace

TEST_CASE("qjit gru calibrate and run --cpu: files in, the reference's integers out", "[gru][cli]") {
  qjit::test::TempDir dir;
  RealisticCase c = realistic_case(24, 20, 3);
  c.w.weight_ih = as_float32(c.w.weight_ih), c.w.weight_hh = as_float32(c.w.weight_hh);
  c.w.bias_ih = as_float32(c.w.bias_ih), c.w.bias_hh = as_float32(c.w.bias_hh);
  c.x_calibrate = as_float32(c.x_calibrate);
  io::write_safetensors(dir.file("gru.safetensors"), state_dict(c.w, "gru."));
  io::write_npy(dir.file("x.npy"), float_tensor(io::DType::f32, {c.T, c.N, 24}, c.x_calibrate));

  auto r = qjit_gru("calibrate --weights " + dir.file("gru.safetensors") + " --input " + dir.file("x.npy") + " --bits 16 -o " +
                        dir.file("p.json") + " --weights-out " + dir.file("q.safetensors") + " --json --evaluate",
                    dir);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const auto summary = nlohmann::json::parse(r.out);
  CHECK(summary["ranges"]["h"]["max"].get<double>() > 0);
  CHECK(summary["evaluation"]["mae"].get<double>() < 0.015);
  // The files hold what the library computes from the same weights and input.
  const GruCalibration want = calibrate(c.w, c.x_calibrate, {}, c.T, c.N, {16, 8, 16, true, ZeroPoint::centred});
  std::ifstream pf(dir.file("p.json"));
  CHECK(nlohmann::json::parse(pf) == want.params);
  const io::Tensor W = io::read_tensor(dir.file("q.safetensors") + ":W"), bw = io::read_tensor(dir.file("q.safetensors") + ":bw");
  CHECK(W.dtype == io::DType::i8);
  CHECK(W.shape == std::vector<int64_t>{60, 24});
  const auto Wq = values_of<int8_t>(W);
  CHECK(std::vector<int32_t>(Wq.begin(), Wq.end()) == want.weights.W);
  CHECK(values_of<int32_t>(bw) == want.weights.bw);

  // run --cpu on the float input equals the reference on the quantized input.
  r = qjit_gru("run --params " + dir.file("p.json") + " --weights " + dir.file("q.safetensors") + " --input " +
                   dir.file("x.npy") + " -o " + dir.file("y.npy") + " --float-out " + dir.file("yf.npy") + " --cpu --json",
               dir);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["device"] == "cpu");
  const GruParams p = GruParams::from_json(want.params);
  const auto xq = quantize(c.x_calibrate, p.x);
  const std::vector<int32_t> h0(static_cast<size_t>(c.N * 20), quantize(0.0, p.h));
  const auto hq = gru_quant_reference(p, want.weights, xq, h0, c.T, c.N);
  const io::Tensor y = io::read_tensor(dir.file("y.npy"));
  CHECK(y.dtype == io::DType::i32);
  CHECK(y.shape == std::vector<int64_t>{c.T, c.N, 20});
  CHECK(values_of<int32_t>(y) == hq);
  const io::Tensor yf = io::read_tensor(dir.file("yf.npy"));
  CHECK(yf.dtype == io::DType::f32);
  CHECK(values_of<float>(yf)[5] == static_cast<float>(dequantize(hq[5], p.h)));

  // An int32 input is taken as x's codes: the same result.
  io::write_npy(dir.file("xq.npy"), io::Tensor{io::DType::i32, {c.T, c.N, 24}, std::string(reinterpret_cast<const char*>(xq.data()), xq.size() * 4)});
  r = qjit_gru("run --params " + dir.file("p.json") + " --weights " + dir.file("q.safetensors") + " --input " +
                   dir.file("xq.npy") + " -o " + dir.file("y2.npy") + " --cpu",
               dir);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK(values_of<int32_t>(io::read_tensor(dir.file("y2.npy"))) == hq);

  // Without --cpu and without a GPU: exit code 3 and a plain message.
  r = qjit_gru("run --params " + dir.file("p.json") + " --weights " + dir.file("q.safetensors") + " --input " +
                   dir.file("x.npy") + " -o " + dir.file("y3.npy"),
               dir);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, Catch::Contains("no usable GPU") && Catch::Contains("--cpu"));

  // A folder of .npy files (float64 here) serves as well.
  std::filesystem::create_directories(dir.file("npy"));
  const int64_t C = 24, H = 20;
  io::write_npy(dir.file("npy/weight_ih_l0.npy"), float_tensor(io::DType::f64, {3 * H, C}, c.w.weight_ih));
  io::write_npy(dir.file("npy/weight_hh_l0.npy"), float_tensor(io::DType::f64, {3 * H, H}, c.w.weight_hh));
  io::write_npy(dir.file("npy/bias_ih_l0.npy"), float_tensor(io::DType::f64, {3 * H}, c.w.bias_ih));
  io::write_npy(dir.file("npy/bias_hh_l0.npy"), float_tensor(io::DType::f64, {3 * H}, c.w.bias_hh));
  r = qjit_gru("calibrate --weights " + dir.file("npy") + " --input " + dir.file("x.npy") + " --bits 16 -o " +
                   dir.file("p2.json") + " --weights-out " + dir.file("q2.safetensors"),
               dir);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  std::ifstream pf2(dir.file("p2.json"));
  CHECK(nlohmann::json::parse(pf2) == want.params);
}

TEST_CASE("qjit gru: --help, and bad inputs are named, exit code 2", "[gru][cli]") {
  qjit::test::TempDir dir;
  for (const char* sub : {"", " calibrate", " run"}) {
    const auto r = qjit_gru(std::string(sub) + " --help", dir);
    INFO(sub << ": " << describe(r));
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("Usage") && Catch::Contains("Exit codes"));
  }
  const RealisticCase c = realistic_case(8, 6, 5);
  auto dict = state_dict(c.w, "");
  dict.erase("bias_hh_l0");
  io::write_safetensors(dir.file("partial.safetensors"), dict);
  io::write_safetensors(dir.file("gru.safetensors"), state_dict(c.w, "model.rnn."));
  io::write_npy(dir.file("x.npy"), float_tensor(io::DType::f32, {c.T, c.N, 8}, c.x_calibrate));
  io::write_npy(dir.file("x7.npy"), float_tensor(io::DType::f32, {c.T, c.N, 7}, std::vector<double>(static_cast<size_t>(c.T * c.N * 7), 0.1)));
  const std::string outs = " -o " + dir.file("p.json") + " --weights-out " + dir.file("q.safetensors");

  auto r = qjit_gru("calibrate --weights " + dir.file("partial.safetensors") + " --input " + dir.file("x.npy") + outs, dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("has no bias_hh_l0"));
  r = qjit_gru("calibrate --weights " + dir.file("gru.safetensors") + " --input " + dir.file("x7.npy") + outs, dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("shape [50, 2, 7]") && Catch::Contains("C = input_size 8"));
  io::write_npy(dir.file("x0.npy"), float_tensor(io::DType::f32, {0, 2, 8}, {}));
  r = qjit_gru("calibrate --weights " + dir.file("gru.safetensors") + " --input " + dir.file("x0.npy") + outs, dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("x0.npy has shape [0, 2, 8]: no data"));
  r = qjit_gru("calibrate --weights " + dir.file("gru.safetensors") + " --input " + dir.file("nothing.npy") + outs, dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--input") && Catch::Contains("nothing.npy"));
  r = qjit_gru("calibrate --weights " + dir.file("gru.safetensors") + " --input " + dir.file("x.npy") + " --bits 17" + outs, dir);
  CHECK(r.exit_code == 2);

  // A prefixed state dict calibrates; then run refuses inputs that do not fit the params.
  r = qjit_gru("calibrate --weights " + dir.file("gru.safetensors") + " --input " + dir.file("x.npy") + outs, dir);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("model.rnn.weight_ih_l0"));
  const std::string run = "run --params " + dir.file("p.json") + " --weights " + dir.file("q.safetensors") + " -o " +
                          dir.file("y.npy") + " --cpu --input ";
  r = qjit_gru(run + dir.file("x7.npy"), dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("x7.npy has shape [50, 2, 7]"));
  io::write_npy(dir.file("xbig.npy"), io::Tensor{io::DType::i32, {1, 1, 8}, std::string(32, '\x7f')});
  r = qjit_gru(run + dir.file("xbig.npy"), dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("element 0 = 2139062143 is outside"));
  r = qjit_gru(run + dir.file("x.npy") + " --h0 " + dir.file("x.npy"), dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--h0"));
  // Weights that do not match the params.
  r = qjit_gru("run --params " + dir.file("p.json") + " --weights " + dir.file("gru.safetensors") + " -o " +
                   dir.file("y.npy") + " --cpu --input " + dir.file("x.npy"),
               dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("has no tensor 'W'"));
}
