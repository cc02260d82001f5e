// qjit gru calibrate / run: gru_quant's params and integer weights from a
// PyTorch GRU and calibration sequences (tuner/gru_calibrate.h), and the
// quantized forward on a .npy input, on the GPU or (--cpu) by the CPU
// reference that defines it.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <iostream>
#include <memory>

#include "cli/common.h"
#include "cli/gru_tensors.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "qjit/qjit.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "tuner/gru_calibrate.h"
#include "tuner/timing.h"

namespace qjit::cli {
namespace {

using codegen::gru::GruParams;
using codegen::gru::QTensor;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "label: step 12/100" on stderr, at most every two seconds: silent for
// anything quicker.
class Progress {
 public:
  Progress(std::string label, bool quiet) : label_(std::move(label)), quiet_(quiet) {}
  void operator()(int64_t done, int64_t total) {
    if (quiet_ || seconds_since(last_) < 2.0) return;
    last_ = Clock::now();
    std::cerr << fmt("%s: step %lld/%lld\n", label_.c_str(), static_cast<long long>(done), static_cast<long long>(total));
  }

 private:
  std::string label_;
  bool quiet_;
  Clock::time_point last_ = Clock::now();
};

void write_text(const std::string& option, const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    if (!f.flush()) throw Error("io", option + " " + path + ": cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("io", option + " " + path + ": cannot rename " + tmp + ": " + ec.message());
}

// The params document for a reader: objects indented, arrays of numbers on
// one line (a LUT segment, a row of per-channel shifts), one segment a line.
std::string readable(const nlohmann::json& j, const std::string& indent = "") {
  const auto flat = [](const nlohmann::json& a) {
    return a.is_array() && std::all_of(a.begin(), a.end(), [](const nlohmann::json& v) { return v.is_number(); });
  };
  if (j.is_object() && !j.empty()) {
    std::string s = "{\n";
    for (auto it = j.begin(); it != j.end(); ++it)
      s += indent + "  " + nlohmann::json(it.key()).dump() + ": " + readable(it.value(), indent + "  ") +
           (std::next(it) == j.end() ? "\n" : ",\n");
    return s + indent + "}";
  }
  if (j.is_array() && !j.empty() && !flat(j)) {
    std::string s = "[\n";
    for (size_t i = 0; i < j.size(); ++i)
      s += indent + "  " + readable(j[i], indent + "  ") + (i + 1 == j.size() ? "\n" : ",\n");
    return s + indent + "]";
  }
  return j.dump();
}

std::string layout_x(int64_t C) {
  return "[T][N][C] with C = input_size " + std::to_string(C) + " (time first, as torch.nn.GRU with batch_first=False)";
}

// The forward pass on the CPU reference, one step at a time (for progress).
std::vector<int32_t> run_cpu(const GruParams& p, const tuner::GruWeights& w, const std::vector<int32_t>& x,
                             std::vector<int32_t> h, int64_t T, int64_t N, Progress& progress) {
  const size_t step_x = static_cast<size_t>(N * p.input_size), step_h = static_cast<size_t>(N * p.hidden_size);
  std::vector<int32_t> out(static_cast<size_t>(T) * step_h);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<int32_t> xt(x.begin() + static_cast<std::ptrdiff_t>(t * step_x),
                                  x.begin() + static_cast<std::ptrdiff_t>((t + 1) * step_x));
    h = tuner::gru_quant_reference(p, w, xt, h, 1, N);
    std::copy(h.begin(), h.end(), out.begin() + static_cast<std::ptrdiff_t>(t * step_h));
    progress(t + 1, T);
  }
  return out;
}

// The forward pass through the runtime entry qjit::gru_quant (a shape not
// yet cached compiles its default kernels first).
std::vector<int32_t> run_gpu(const GruParams& p, const tuner::GruWeights& w, const std::vector<int32_t>& x,
                             const std::vector<int32_t>& h0, int64_t T, int64_t N) {
  if (T > INT_MAX || N > INT_MAX) throw Error("argument", "--input: T and N must each be below 2^31 for the GPU");
  const std::vector<int8_t> W(w.W.begin(), w.W.end()), R(w.R.begin(), w.R.end());
  tuner::DeviceBuffer dx(x.size() * 4), dh0(h0.size() * 4), dW(W.size()), dR(R.size()), dbw(w.bw.size() * 4),
      dbr(w.br.size() * 4), dy(static_cast<size_t>(T * N * p.hidden_size) * 4);
  dx.upload(x.data(), dx.bytes());
  dh0.upload(h0.data(), dh0.bytes());
  dW.upload(W.data(), dW.bytes());
  dR.upload(R.data(), dR.bytes());
  dbw.upload(w.bw.data(), dbw.bytes());
  dbr.upload(w.br.data(), dbr.bytes());
  auto ptr = [](const tuner::DeviceBuffer& b) { return reinterpret_cast<void*>(b.ptr()); };
  const GruQuantShape shape{static_cast<int>(T), static_cast<int>(N), static_cast<int>(p.input_size),
                            static_cast<int>(p.hidden_size), p.to_json().dump()};
  gru_quant(shape, {ptr(dx), ptr(dh0), ptr(dW), ptr(dR), ptr(dbw), ptr(dbr), ptr(dy)});
  QJIT_CU(cuCtxSynchronize());
  std::vector<int32_t> y(static_cast<size_t>(T * N * p.hidden_size));
  dy.download(y.data(), y.size() * 4);
  return y;
}

io::Tensor int32_tensor(std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  io::Tensor t{io::DType::i32, std::move(shape), std::string(v.size() * 4, '\0')};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}
io::Tensor float32_tensor(std::vector<int64_t> shape, const std::vector<double>& v) {
  io::Tensor t{io::DType::f32, std::move(shape), std::string(v.size() * 4, '\0')};
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    std::memcpy(&t.bytes[i * 4], &f, 4);
  }
  return t;
}

std::string covers(const QTensor& t) {
  return fmt("[%.4g, %.4g]", tuner::dequantize(t.lo(), t), tuner::dequantize(t.hi(), t));
}

void add_calibrate(CLI::App* gru, int& rc) {
  auto* cmd = gru->add_subcommand("calibrate", "params and integer weights from a PyTorch GRU and calibration input");
  cmd->footer(std::string(
                  "Tracks every tensor's min/max per time step with the seed's EMA (0.9 old + 0.1 step), then picks\n"
                  "power-of-two scales and zero points (docs/gru_quant.md). Writes the params JSON and W, R (int8),\n"
                  "bw, br (int32) in the seed's gate order u, r, n.\n"
                  "Example: qjit gru calibrate --weights gru.safetensors --input x.npy -o params.json --weights-out q.safetensors\n") +
              kExitCodesHelp);
  struct Opts {
    std::string weights, input, h0, out, weights_out, zero_point = "centred";
    int bits = 8, weight_bits = 8, segments = 16;
    bool evaluate = false, json = false, quiet = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--weights", o->weights,
                  "torch.nn.GRU state dict: one .safetensors file, or a folder of .npy files, holding weight_ih_l0, "
                  "weight_hh_l0, bias_ih_l0, bias_hh_l0 (a prefix such as gru. is allowed)")
      ->required();
  cmd->add_option("--input", o->input, "calibration input x, float [T][N][C] (.npy or .safetensors)")->required();
  cmd->add_option("--h0", o->h0, "initial state, float [N][H] (default zeros)");
  cmd->add_option("--bits", o->bits, "activation bits: x, h, the linear outputs, the gates (2..16; 8 or 16 usual)")
      ->check(CLI::Range(2, 16))
      ->capture_default_str();
  cmd->add_option("--weight-bits", o->weight_bits, "bits of W and R (2..8)")->check(CLI::Range(2, 8))->capture_default_str();
  cmd->add_option("--lut-segments", o->segments, "segments per sigmoid/tanh LUT (8..64)")
      ->check(CLI::Range(8, 64))
      ->capture_default_str();
  cmd->add_option("--zero-point", o->zero_point,
                  "where a signed tensor's zero point puts the slack of its power-of-two scale: centred (half below "
                  "min, half above max) or seed (zp = round(-min/scale): all above max)")
      ->check(CLI::IsMember({"centred", "seed"}))
      ->capture_default_str();
  cmd->add_option("-o,--out", o->out, "write the params JSON here")->required();
  cmd->add_option("--weights-out", o->weights_out, "write W, R, bw, br here (.safetensors)")->required();
  cmd->add_flag("--evaluate", o->evaluate,
                "also run the quantized CPU reference on the calibration input and report its error against the float GRU");
  cmd->add_flag("--json", o->json, "print a summary as JSON on stdout");
  cmd->add_flag("-q,--quiet", o->quiet, "no progress output");
  cmd->callback([o, &rc] {
    const auto start = Clock::now();
    std::vector<std::string> names;
    const tuner::GruFloatWeights w = read_torch_gru("--weights", o->weights, &names);
    const int64_t C = w.input_size, H = w.hidden_size;
    const io::Tensor xt = read_tensor_for("--input", o->input);
    if (xt.shape.size() != 3 || xt.shape[2] != C)
      throw Error("argument", "--input " + o->input + " has shape " + shape_text(xt.shape) + "; expected " + layout_x(C));
    const int64_t T = xt.shape[0], N = xt.shape[1];
    if (T < 1 || N < 1) throw Error("argument", "--input " + o->input + " has shape " + shape_text(xt.shape) + ": no data");
    const std::vector<double> x = float_values(xt, "--input " + o->input);
    std::vector<double> h0;
    if (!o->h0.empty()) {
      const io::Tensor ht = read_tensor_for("--h0", o->h0);
      if (ht.shape != std::vector<int64_t>{N, H})
        throw Error("argument", "--h0 " + o->h0 + " has shape " + shape_text(ht.shape) + "; expected [N][H] = " +
                                    shape_text({N, H}));
      h0 = float_values(ht, "--h0 " + o->h0);
    }
    const tuner::GruQuantConfig cfg{o->bits, o->weight_bits, o->segments, true,
                                    o->zero_point == "seed" ? tuner::ZeroPoint::seed : tuner::ZeroPoint::centred};
    Progress progress("calibrating", o->quiet);
    const tuner::GruRanges ranges = tuner::track_ranges(w, x, h0, T, N, std::ref(progress));
    const tuner::GruCalibration cal = tuner::quantize_gru(w, ranges, cfg);
    write_text("-o", o->out, readable(cal.params) + "\n");
    write_gru_weights(o->weights_out, cal.weights, C, H);

    const GruParams p = GruParams::from_json(cal.params);
    nlohmann::json summary = {{"input_size", C}, {"hidden_size", H}, {"t", T}, {"n", N}, {"bits", o->bits},
                              {"weight_bits", o->weight_bits}, {"zero_point", o->zero_point}, {"params", o->out}, {"weights", o->weights_out},
                              {"adjustments", cal.adjustments}};
    const QTensor* q[] = {&p.x, &p.h, &p.ih, &p.hh, &p.u_in, &p.u_out, &p.r_in, &p.r_out, &p.n_in, &p.n_out};
    const auto named = ranges.named();
    for (size_t i = 0; i < named.size(); ++i)
      summary["ranges"][named[i].first] = {{"min", named[i].second->min}, {"max", named[i].second->max},
                                           {"shift", q[i]->shift}, {"zp", q[i]->zp}};
    if (o->evaluate) {
      Progress eval_progress("evaluating", o->quiet);
      const std::vector<int32_t> h0q = h0.empty() ? std::vector<int32_t>(static_cast<size_t>(N * H), tuner::quantize(0.0, p.h))
                                                  : tuner::quantize(h0, p.h);
      const auto hq = run_cpu(p, cal.weights, tuner::quantize(x, p.x), h0q, T, N, eval_progress);
      const auto a = tuner::compare(tuner::dequantize(hq, p.h), tuner::gru_float_forward(w, x, h0, T, N));
      summary["evaluation"] = {{"mse", a.mse}, {"mae", a.mae}, {"max_abs", a.max_abs}, {"cosine", a.cosine}};
    }
    summary["seconds"] = seconds_since(start);
    if (o->json) {
      std::cout << summary.dump(2) << "\n";
    } else {
      std::cout << fmt("GRU input_size %lld, hidden_size %lld from %s (%s); calibrated on T = %lld, N = %lld\n",
                       static_cast<long long>(C), static_cast<long long>(H), o->weights.c_str(),
                       names[0].c_str(), static_cast<long long>(T), static_cast<long long>(N))
                << fmt("%-6s %11s %11s %5s %7s %6s %7s  %s\n", "tensor", "EMA min", "EMA max", "bits", "signed",
                       "shift", "zp", "covers");
      for (size_t i = 0; i < named.size(); ++i)
        std::cout << fmt("%-6s %11.4g %11.4g %5d %7s %6d %7lld  %s\n", named[i].first.c_str(), named[i].second->min,
                         named[i].second->max, q[i]->bits, q[i]->is_signed ? "yes" : "no", q[i]->shift,
                         static_cast<long long>(q[i]->zp), covers(*q[i]).c_str());
      for (const auto& [name, wq] : {std::pair{"W", &p.W}, std::pair{"R", &p.R}, std::pair{"bw", &p.bw}, std::pair{"br", &p.br}}) {
        const auto [lo, hi] = std::minmax_element(wq->shift.begin(), wq->shift.end());
        std::cout << fmt("%-6s %d bits, symmetric, shift %d..%d per channel\n", name, wq->bits, *lo, *hi);
      }
      for (const auto& a : cal.adjustments) std::cout << "adjusted for the int32 rule: " << a << "\n";
      if (summary.contains("evaluation"))
        std::cout << fmt("quantized vs float on the calibration input: MSE %.3g, MAE %.3g, max %.3g, cosine %.6f\n",
                         summary["evaluation"]["mse"].get<double>(), summary["evaluation"]["mae"].get<double>(),
                         summary["evaluation"]["max_abs"].get<double>(), summary["evaluation"]["cosine"].get<double>());
      std::cout << "wrote " << o->out << " and " << o->weights_out << "\n"
                << fmt("run it: qjit gru run --params %s --weights %s --input X.npy -o Y.npy\n", o->out.c_str(),
                       o->weights_out.c_str())
                << fmt("tune it: qjit tune --op gru_quant --shape t=%lld,n=%lld,c=%lld,h=%lld,params=@%s\n",
                       static_cast<long long>(T), static_cast<long long>(N), static_cast<long long>(C),
                       static_cast<long long>(H), o->out.c_str());
    }
    rc = kOk;
  });
}

void add_run(CLI::App* gru, int& rc) {
  auto* cmd = gru->add_subcommand("run", "the quantized GRU forward on an input file (GPU, or --cpu)");
  cmd->footer(std::string(
                  "A float input is quantized with the params' x; an int32 input is taken as x's codes. Writes h for\n"
                  "every step as int32 [T][N][H] and, with --float-out, dequantized as float32.\n"
                  "Example: qjit gru run --params params.json --weights q.safetensors --input x.npy -o h.npy --cpu\n") +
              kExitCodesHelp);
  struct Opts {
    std::string params, weights, input, h0, out, float_out;
    CacheOption cache;
    bool cpu = false, json = false, quiet = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--params", o->params, "the params JSON (from qjit gru calibrate)")->required();
  cmd->add_option("--weights", o->weights, "W, R, bw, br (.safetensors from qjit gru calibrate)")->required();
  cmd->add_option("--input", o->input, "x [T][N][C]: float (quantized here) or int32 codes")->required();
  cmd->add_option("--h0", o->h0, "initial state [N][H]: float or int32 codes (default: float zeros)");
  cmd->add_option("-o,--out", o->out, "write h as int32 [T][N][H] here (.npy)")->required();
  cmd->add_option("--float-out", o->float_out, "also write h dequantized, float32 [T][N][H] (.npy)");
  cmd->add_flag("--cpu", o->cpu, "run the CPU reference instead of the GPU");
  o->cache.add_to(cmd);
  cmd->add_flag("--json", o->json, "print a summary as JSON on stdout");
  cmd->add_flag("-q,--quiet", o->quiet, "no progress output");
  cmd->callback([o, &rc] {
    const auto start = Clock::now();
    const nlohmann::json doc = parse_json_input(read_input_file("--params", o->params), "--params " + o->params);
    GruParams p;
    try {
      p = GruParams::from_json(doc);
    } catch (const Error& e) {
      if (e.stage() != "gru") throw;
      throw Error("argument", "--params " + o->params + ": " + e.what());
    }
    const int64_t C = p.input_size, H = p.hidden_size;
    const tuner::GruWeights w = read_gru_weights("--weights", o->weights, p);
    const Activation x = read_activation("--input", o->input, p.x, 3, C, layout_x(C));
    const int64_t T = x.shape[0], N = x.shape[1];
    if (T < 1 || N < 1) throw Error("argument", "--input " + o->input + " has shape " + shape_text(x.shape) + ": no data");
    std::vector<int32_t> h0(static_cast<size_t>(N * H), tuner::quantize(0.0, p.h));
    int64_t h0_saturated = 0;
    if (!o->h0.empty()) {
      const Activation h = read_activation("--h0", o->h0, p.h, 2, H, "[N][H] = " + shape_text({N, H}));
      if (h.shape[0] != N)
        throw Error("argument", "--h0 " + o->h0 + " has shape " + shape_text(h.shape) + "; expected [N][H] = " +
                                    shape_text({N, H}) + " (N from --input)");
      h0 = h.codes, h0_saturated = h.saturated;
    }
    if (!o->quiet && x.saturated + h0_saturated > 0)
      std::cerr << fmt("note: %lld input values lie outside the params' range and were saturated\n",
                       static_cast<long long>(x.saturated + h0_saturated));

    std::vector<int32_t> y;
    std::string device = "cpu";
    if (o->cpu) {
      Progress progress("running on the CPU", o->quiet);
      y = run_cpu(p, w, x.codes, h0, T, N, progress);
    } else {
      std::string why;
      if (!runtime::gpu_available(&why)) {
        std::cerr << "qjit gru run: no usable GPU: " << why << "\n(--cpu runs the CPU reference)\n";
        rc = kNoGpu;
        return;
      }
      if (!o->cache.path.empty()) set_cache_path(o->cache.path);
      device = runtime::current_device().identity.name;
      y = run_gpu(p, w, x.codes, h0, T, N);
    }
    io::write_npy(o->out, int32_tensor({T, N, H}, y));
    if (!o->float_out.empty()) io::write_npy(o->float_out, float32_tensor({T, N, H}, tuner::dequantize(y, p.h)));
    if (o->json) {
      std::cout << nlohmann::json{{"device", device}, {"t", T}, {"n", N}, {"c", C}, {"h", H},
                                  {"input", x.was_float ? "float" : "int32"}, {"saturated_inputs", x.saturated + h0_saturated},
                                  {"output", o->out}, {"float_output", o->float_out}, {"seconds", seconds_since(start)}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << fmt("ran T = %lld, N = %lld on %s in %.2f s; wrote %s", static_cast<long long>(T),
                       static_cast<long long>(N), device.c_str(), seconds_since(start), o->out.c_str())
                << (o->float_out.empty() ? "" : " and " + o->float_out) << "\n";
    }
    rc = kOk;
  });
}

}  // namespace

void add_gru(CLI::App& app, int& rc) {
  auto* gru = app.add_subcommand("gru", "the quantized GRU (gru_quant): calibrate from PyTorch, run on an input");
  gru->require_subcommand(1);
  gru->footer(kExitCodesHelp);
  add_calibrate(gru, rc);
  add_run(gru, rc);
}

}  // namespace qjit::cli
