#include "cli/gru_tensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "codegen/error.h"
#include "codegen/numeric.h"
#include "tuner/gru_calibrate.h"

namespace qjit::cli {
namespace {

namespace fs = std::filesystem;

const char* const kTorchNames[] = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"};

// The state dict key `key` is `base`, or `base` under a prefix ("gru.weight_ih_l0").
bool names_tensor(const std::string& key, const std::string& base) {
  return key == base || (key.size() > base.size() && key.compare(key.size() - base.size(), base.size(), base) == 0 &&
                         key[key.size() - base.size() - 1] == '.');
}

std::string join(const std::vector<std::string>& items, size_t most = 12) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < most; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > most) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s.empty() ? "nothing" : s;
}

template <class T>
std::vector<T> raw_values(const io::Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.elements()));
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(T));  // little-endian files on little-endian hosts
  return v;
}

template <class T>
io::Tensor make_tensor(io::DType dtype, std::vector<int64_t> shape, const std::vector<int32_t>& codes) {
  io::Tensor t{dtype, std::move(shape), std::string(codes.size() * sizeof(T), '\0')};
  for (size_t i = 0; i < codes.size(); ++i) {
    const T v = static_cast<T>(codes[i]);
    std::memcpy(&t.bytes[i * sizeof(T)], &v, sizeof(T));
  }
  return t;
}

}  // namespace

io::Tensor read_tensor_for(const std::string& option, const std::string& path) {
  try {
    return io::read_tensor(path);
  } catch (const Error& e) {
    if (e.stage() != "io") throw;
    throw Error("argument", option + ": " + std::string(e.what()).substr(4));  // without "io: "
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

std::vector<double> float_values(const io::Tensor& t, const std::string& what) {
  std::vector<double> v;
  switch (t.dtype) {
    case io::DType::f64: v = raw_values<double>(t); break;
    case io::DType::f32:
      for (float f : raw_values<float>(t)) v.push_back(f);
      break;
    case io::DType::f16:
      for (uint16_t h : raw_values<uint16_t>(t)) v.push_back(half_to_float(h));
      break;
    case io::DType::bf16:
      for (uint16_t h : raw_values<uint16_t>(t)) v.push_back(bf16_to_float(h));
      break;
    default:
      throw Error("argument", what + " holds " + io::dtype_name(t.dtype) +
                                  "; expected floats (float16, bfloat16, float32 or float64)");
  }
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) throw Error("argument", what + ": element " + std::to_string(i) + " is not finite");
  return v;
}

std::vector<int32_t> int32_values(const io::Tensor& t, const std::string& what) {
  if (t.dtype != io::DType::i32) throw Error("argument", what + " holds " + io::dtype_name(t.dtype) + "; expected int32");
  return raw_values<int32_t>(t);
}

tuner::GruFloatWeights read_torch_gru(const std::string& option, const std::string& path, std::vector<std::string>* names) {
  std::vector<std::string> keys;
  std::map<std::string, std::string> tensor_path;  // key → a path read_tensor takes
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".npy") {
        keys.push_back(e.path().stem().string());
        tensor_path[keys.back()] = e.path().string();
      }
  } else if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
    io::SafetensorsHeader h;
    try {
      h = io::read_safetensors_header(path);
    } catch (const Error& e) {
      if (e.stage() != "io") throw;
      throw Error("argument", option + ": " + std::string(e.what()).substr(4));
    }
    for (const auto& [key, entry] : h.tensors) keys.push_back(key), tensor_path[key] = path + ":" + key;
  } else {
    throw Error("argument", option + " " + path + " is neither a .safetensors file nor a folder of .npy files");
  }
  std::vector<std::string> found, missing;
  for (const char* base : kTorchNames) {
    std::vector<std::string> hits;
    for (const auto& k : keys)
      if (names_tensor(k, base)) hits.push_back(k);
    if (hits.size() > 1)
      throw Error("argument", option + " " + path + " holds several " + base + ": " + join(hits) +
                                  "; give a file with one GRU's tensors");
    if (hits.empty()) missing.push_back(base);
    else found.push_back(hits[0]);
  }
  if (!missing.empty())
    throw Error("argument", option + " " + path + " has no " + join(missing) +
                                " (torch.nn.GRU state dict names, optionally under a prefix such as gru.weight_ih_l0); "
                                "it holds " + join(keys));
  if (names) *names = found;

  std::vector<io::Tensor> t;
  for (const auto& k : found) t.push_back(read_tensor_for(option, tensor_path[k]));
  const auto& ih = t[0].shape;
  if (ih.size() != 2 || ih[0] % 3 != 0 || ih[0] == 0 || ih[1] == 0)
    throw Error("argument", option + " " + found[0] + " has shape " + shape_text(ih) + "; expected [3·hidden_size, input_size]");
  const int64_t H = ih[0] / 3, C = ih[1];
  const std::vector<int64_t> want[] = {{3 * H, C}, {3 * H, H}, {3 * H}, {3 * H}};
  for (size_t i = 1; i < 4; ++i)
    if (t[i].shape != want[i])
      throw Error("argument", option + " " + found[i] + " has shape " + shape_text(t[i].shape) + "; expected " +
                                  shape_text(want[i]) + " for hidden_size " + std::to_string(H) + " (from " +
                                  found[0] + " " + shape_text(ih) + ")");
  tuner::GruFloatWeights w;
  w.input_size = C, w.hidden_size = H;
  w.weight_ih = float_values(t[0], option + " " + found[0]);
  w.weight_hh = float_values(t[1], option + " " + found[1]);
  w.bias_ih = float_values(t[2], option + " " + found[2]);
  w.bias_hh = float_values(t[3], option + " " + found[3]);
  return w;
}

void write_gru_weights(const std::string& path, const tuner::GruWeights& w, int64_t C, int64_t H) {
  std::map<std::string, io::Tensor> t;
  t["W"] = make_tensor<int8_t>(io::DType::i8, {3 * H, C}, w.W);
  t["R"] = make_tensor<int8_t>(io::DType::i8, {3 * H, H}, w.R);
  t["bw"] = make_tensor<int32_t>(io::DType::i32, {3 * H}, w.bw);
  t["br"] = make_tensor<int32_t>(io::DType::i32, {3 * H}, w.br);
  io::write_safetensors(path, t, {{"format", "qjit gru_quant weights"}, {"gate_order", "u,r,n"}});
}

tuner::GruWeights read_gru_weights(const std::string& option, const std::string& path, const codegen::gru::GruParams& p) {
  const int64_t C = p.input_size, H = p.hidden_size;
  struct Want {
    const char* name;
    io::DType dtype;
    std::vector<int64_t> shape;
    const codegen::gru::QWeight* q;
    std::vector<int32_t>* out;
  };
  tuner::GruWeights w;
  const Want wants[] = {{"W", io::DType::i8, {3 * H, C}, &p.W, &w.W},
                        {"R", io::DType::i8, {3 * H, H}, &p.R, &w.R},
                        {"bw", io::DType::i32, {3 * H}, &p.bw, &w.bw},
                        {"br", io::DType::i32, {3 * H}, &p.br, &w.br}};
  for (const auto& want : wants) {
    const std::string what = option + " " + path + ":" + want.name;
    const io::Tensor t = read_tensor_for(option, path + ":" + want.name);
    if (t.dtype != want.dtype)
      throw Error("argument", what + " holds " + io::dtype_name(t.dtype) + "; expected " + io::dtype_name(want.dtype));
    if (t.shape != want.shape)
      throw Error("argument", what + " has shape " + shape_text(t.shape) + "; the params (input_size " +
                                  std::to_string(C) + ", hidden_size " + std::to_string(H) + ") need " +
                                  shape_text(want.shape));
    if (t.dtype == io::DType::i8)
      for (int8_t v : raw_values<int8_t>(t)) want.out->push_back(v);
    else
      *want.out = raw_values<int32_t>(t);
    const int64_t top = want.q->max_abs();
    for (size_t i = 0; i < want.out->size(); ++i)
      if ((*want.out)[i] < -top || (*want.out)[i] > top - 1)
        throw Error("argument", what + ": element " + std::to_string(i) + " = " + std::to_string((*want.out)[i]) +
                                    " is outside the " + std::to_string(want.q->bits) + "-bit range the params give");
  }
  return w;
}

Activation read_activation(const std::string& option, const std::string& path, const codegen::gru::QTensor& q,
                           size_t rank, int64_t width, const std::string& layout) {
  const io::Tensor t = read_tensor_for(option, path);
  const std::string what = option + " " + path;
  if (t.shape.size() != rank || t.shape.back() != width)
    throw Error("argument", what + " has shape " + shape_text(t.shape) + "; expected " + layout);
  Activation a;
  a.shape = t.shape;
  if (t.dtype == io::DType::i32) {
    a.codes = raw_values<int32_t>(t);
    for (size_t i = 0; i < a.codes.size(); ++i)
      if (a.codes[i] < q.lo() || a.codes[i] > q.hi())
        throw Error("argument", what + " (int32: already quantized): element " + std::to_string(i) + " = " +
                                    std::to_string(a.codes[i]) + " is outside the params' range " +
                                    std::to_string(q.lo()) + ".." + std::to_string(q.hi()));
    return a;
  }
  const std::vector<double> v = float_values(t, what);
  a.was_float = true;
  a.codes = tuner::quantize(v, q);
  // Saturated: further from its code than rounding alone puts it.
  for (size_t i = 0; i < v.size(); ++i) a.saturated += std::fabs(v[i] - tuner::dequantize(a.codes[i], q)) > std::ldexp(0.5, -q.shift);
  return a;
}

}  // namespace qjit::cli
