// qjit repack --checkpoint: every 4-bit linear layer of an AWQ or GPTQ
// .safetensors checkpoint to wq_gemm's native layout in one run. A layer is
// a triple PREFIX.qweight / PREFIX.qzeros / PREFIX.scales (qzeros absent for
// symmetric GPTQ); K, N and the group size come from the tensors' shapes,
// checked against the checkpoint's quantization_config when a config.json is
// given. The output .safetensors holds, per layer, PREFIX.qweight (native
// words, uint32 [K·N/8]), PREFIX.zeros (uint8 [K/g][N], unless symmetric) and
// PREFIX.scales (unchanged); the manifest lists the wq_gemm specs to tune,
// one JSON line each, with the layers that use it. Every other tensor of the
// checkpoint (embeddings, norms, the head, biases) is carried over unchanged,
// so the output is a whole model; a layer's PREFIX.g_idx is dropped after a
// check that it is the plain k / g order (act-order checkpoints are refused).
#include "cli/repack_checkpoint.h"

#include <iostream>
#include <map>
#include <set>

#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/spec.h"
#include "io/tensor_file.h"
#include "tuner/reference/wq_gemm.h"

namespace qjit::cli {
namespace {

namespace io = qjit::io;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t;
  for (int64_t d : s) t += (t.empty() ? "" : ", ") + std::to_string(d);
  return "[" + t + "]";
}

std::vector<uint32_t> words_of(const io::Tensor& t) { return io::le32_words(t.bytes); }

// The checkpoint's quantization_config (from config.json), or null.
nlohmann::json quantization_config(const std::string& config_path) {
  if (config_path.empty()) return nullptr;
  const nlohmann::json j = parse_json_input(read_input_file("--config", config_path), "--config " + config_path);
  if (!j.is_object() || !j.contains("quantization_config") || !j["quantization_config"].is_object())
    throw Error("argument", "--config " + config_path + " has no \"quantization_config\" object");
  return j["quantization_config"];
}

}  // namespace

CheckpointRepack repack_checkpoint(const CheckpointOptions& o) {
  const std::string what = "--checkpoint " + o.checkpoint;
  const io::SafetensorsHeader header = io::read_safetensors_header(o.checkpoint);
  std::string from = o.from;
  bool sym = o.sym, v1 = o.gptq_v1;
  int64_t config_group = 0;
  const nlohmann::json qc = quantization_config(o.config);
  if (!qc.is_null()) {
    const std::string method = qc.value("quant_method", std::string());
    if (method != "awq" && method != "gptq")
      throw Error("argument", "--config " + o.config + ": quant_method '" + method + "' (expected awq or gptq)");
    if (!from.empty() && from != method)
      throw Error("argument", "--from " + from + " but --config " + o.config + " says quant_method " + method);
    from = method;
    if (qc.value("bits", 4) != 4)
      throw Error("argument", "--config " + o.config + ": bits " + qc["bits"].dump() + " (repack converts 4-bit weights)");
    if (qc.contains("group_size") && qc["group_size"].is_number_integer()) config_group = qc["group_size"].get<int64_t>();
    if (method == "gptq") {
      sym = sym || qc.value("sym", false);
      v1 = v1 || qc.value("checkpoint_format", std::string("gptq")) == "gptq";
    }
    if (qc.contains("desc_act") && qc["desc_act"].is_boolean() && qc["desc_act"].get<bool>())
      throw Error("argument", "--config " + o.config + ": desc_act (act-order) checkpoints are not supported");
  }
  if (from != "awq" && from != "gptq")
    throw Error("argument", "--checkpoint needs --from awq|gptq or a --config whose quantization_config names it");

  std::vector<std::string> prefixes;
  for (const auto& [name, entry] : header.tensors)
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".qweight") == 0) prefixes.push_back(name.substr(0, name.size() - 8));
  if (prefixes.empty()) throw Error("argument", what + " has no *.qweight tensor");

  const auto tensor = [&](const std::string& name) {
    if (!header.tensors.count(name)) throw Error("argument", what + " has no tensor " + name);
    return io::read_tensor(o.checkpoint + ":" + name);
  };
  CheckpointRepack out;
  std::map<std::string, std::vector<std::string>> layers_of_spec;
  for (const std::string& prefix : prefixes) {
    const io::Tensor qw = tensor(prefix + ".qweight");
    const io::Tensor sc = tensor(prefix + ".scales");
    if ((qw.dtype != io::DType::i32 && qw.dtype != io::DType::u32) || qw.shape.size() != 2)
      throw Error("argument", prefix + ".qweight is " + io::dtype_name(qw.dtype) + " " + shape_text(qw.shape) +
                                  "; expected int32 [rows, cols]");
    if ((sc.dtype != io::DType::f16 && sc.dtype != io::DType::bf16) || sc.shape.size() != 2)
      throw Error("argument", prefix + ".scales is " + io::dtype_name(sc.dtype) + " " + shape_text(sc.shape) +
                                  "; expected float16 or bfloat16 [K/g, N]");
    const bool awq = from == "awq";
    // AWQ: qweight [K, N/8]; GPTQ: qweight [K/8, N]. scales [K/g, N] give g.
    const int64_t k = awq ? qw.shape[0] : qw.shape[0] * 8, n = awq ? qw.shape[1] * 8 : qw.shape[1];
    if (sc.shape[1] != n || sc.shape[0] <= 0 || k % sc.shape[0])
      throw Error("argument", prefix + ".scales " + shape_text(sc.shape) + " does not fit " + prefix + ".qweight " +
                                  shape_text(qw.shape) + " (K = " + std::to_string(k) + ", N = " + std::to_string(n) + ")");
    const int64_t g = k / sc.shape[0];
    if (config_group > 0 && config_group != g && !(config_group == -1 && g == k))
      throw Error("argument", prefix + ": group size " + std::to_string(g) + " from its scales, but the config says " +
                                  std::to_string(config_group));
    const bool layer_sym = sym && !awq;
    std::vector<uint32_t> zeros_words;
    if (!layer_sym) {
      const io::Tensor qz = tensor(prefix + ".qzeros");
      if ((qz.dtype != io::DType::i32 && qz.dtype != io::DType::u32) || qz.shape != std::vector<int64_t>{k / g, n / 8})
        throw Error("argument", prefix + ".qzeros is " + io::dtype_name(qz.dtype) + " " + shape_text(qz.shape) +
                                    "; expected int32 " + shape_text({k / g, n / 8}));
      zeros_words = words_of(qz);
    }
    // The shape rules of the single-layer repack (and of wq_gemm): checked by the spec itself.
    const std::string zero = layer_sym ? "sym" : "int";
    std::string spec = "k=" + std::to_string(k) + ",n=" + std::to_string(n) + ",g=" + std::to_string(g) +
                       ",bits=4,zero=" + zero + (sc.dtype == io::DType::bf16 ? ",scales=bf16" : "");
    try {
      codegen::parse_spec("wq_gemm", spec);
    } catch (const Error& e) {
      throw Error("argument", prefix + ": wq_gemm cannot take this layer (" + spec + "): " + e.what());
    }
    tuner::PlainQuant p = awq ? tuner::unpack_awq(words_of(qw), zeros_words, k, n, g)
                              : tuner::unpack_gptq(words_of(qw), zeros_words, k, n, g, layer_sym);
    p.bits = 4;
    // Original GPTQ checkpoints store zero − 1 (as the single-layer --gptq-v1).
    if (v1 && !awq && !layer_sym)
      for (auto& z : p.z) z = static_cast<uint8_t>(z + 1);
    const std::vector<uint32_t> native = tuner::pack_native(p);
    out.tensors[prefix + ".qweight"] = io::Tensor{io::DType::u32, {static_cast<int64_t>(native.size())}, io::le32_bytes(native)};
    if (!layer_sym)
      out.tensors[prefix + ".zeros"] = io::Tensor{io::DType::u8, {k / g, n}, std::string(p.z.begin(), p.z.end())};
    out.tensors[prefix + ".scales"] = sc;
    if (header.tensors.count(prefix + ".g_idx")) {
      // GPTQ writes g_idx[k] = the group of input row k: k / g unless the
      // rows were reordered (act-order), which wq_gemm's layout cannot express.
      const io::Tensor gi = tensor(prefix + ".g_idx");
      const std::vector<uint32_t> groups = gi.dtype == io::DType::i32 || gi.dtype == io::DType::u32
                                               ? words_of(gi) : std::vector<uint32_t>{};
      bool plain = groups.size() == static_cast<size_t>(k);
      for (size_t i = 0; plain && i < groups.size(); ++i) plain = groups[i] == i / static_cast<size_t>(g);
      if (!plain)
        throw Error("argument", prefix + ".g_idx is not the plain order k / g (act-order checkpoints are not supported)");
    }
    layers_of_spec[spec].push_back(prefix);
  }
  // Everything that is not part of a quantized layer goes through unchanged.
  std::set<std::string> consumed;
  for (const std::string& prefix : prefixes)
    for (const char* part : {".qweight", ".qzeros", ".scales", ".g_idx"}) consumed.insert(prefix + part);
  for (const auto& [name, entry] : header.tensors) {
    if (consumed.count(name)) continue;
    if (out.tensors.count(name))
      throw Error("argument", what + " has a tensor " + name + " that a repacked layer would overwrite");
    out.tensors[name] = tensor(name);
    ++out.carried;
  }
  for (const auto& [spec, layers] : layers_of_spec)
    out.manifest.push_back({{"op", "wq_gemm"}, {"shape", spec}, {"layers", layers}});
  out.from = from;
  out.layers = prefixes.size();
  return out;
}

}  // namespace qjit::cli
