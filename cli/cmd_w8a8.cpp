// qjit w8a8 pack: a float weight W [N][K] → w8a8_gemm's weight tensors, by
// the CPU quantizers the tuner verifies against (tuner/reference/w8a8_quant.h
// for int8, w8a8_fp8.h for e4m3), in the layouts the kernels read. What
// qjit.w8a8.pack_weights does in torch, here without torch or a GPU (and the
// reference its test compares it with).
#include <iostream>
#include <memory>
#include "cli/common.h"
#include "codegen/error.h"
#include "io/tensor_file.h"
#include "tuner/reference/w8a8_fp8.h"
#include "tuner/reference/w8a8_quant.h"

namespace qjit::cli {
namespace {

struct PackOpts {
  std::string weights, out, format = "int8", rule = "offset";
  int64_t block = 128;
  bool json = false;
};

template <typename T>
io::Tensor tensor_of(io::DType dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
  return {dtype, std::move(shape), std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T))};
}

// v [rows][cols] → [cols][rows].
template <typename T>
std::vector<T> transposed(const std::vector<T>& v, int64_t rows, int64_t cols) {
  std::vector<T> out(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = v[r * cols + c];
  return out;
}

std::map<std::string, io::Tensor> pack(const PackOpts& o, const std::vector<float>& w, int64_t n, int64_t k) {
  std::map<std::string, io::Tensor> t;
  if (o.format == "e4m3") {
    if (o.block != 128)
      throw Error("argument", "--block " + std::to_string(o.block) + ": --format e4m3 takes 128 (128 x 128 tiles)");
    if (n % 128 || k % 128)
      throw Error("argument", "--weights is [" + std::to_string(n) + ", " + std::to_string(k) +
                                  "]; --format e4m3 needs N and K multiples of 128");
    const tuner::Fp8Tiles q = tuner::quantize_fp8_tiles(w, n, k, 128, 128);
    t["wq"] = tensor_of(io::DType::u8, {n, k}, q.q);
    t["w_scale"] = tensor_of(io::DType::f32, {k / 128, n / 128}, transposed(q.scale, n / 128, k / 128));
    return t;
  }
  const auto rule = o.rule == "offset" ? tuner::BlockRule::offset : tuner::BlockRule::symmetric;
  const tuner::BlockQuantized q = tuner::pack_weights(w, n, k, o.block, rule);
  const int64_t nb = q.blocks();
  t["wq"] = tensor_of(io::DType::i8, {n, k}, q.q);
  t["w_scale"] = tensor_of(io::DType::f32, {nb, n}, transposed(q.scale, n, nb));
  if (rule == tuner::BlockRule::offset) t["w_offset"] = tensor_of(io::DType::f32, {nb, n}, transposed(q.offset, n, nb));
  t["w_sum"] = tensor_of(io::DType::i32, {nb, n}, transposed(q.sum, n, nb));
  return t;
}

}  // namespace

void add_w8a8(CLI::App& app, int& rc) {
  auto* w8 = app.add_subcommand("w8a8", "w8a8_gemm's weights without a GPU");
  w8->require_subcommand(1);
  w8->footer(kExitCodesHelp);
  auto* p = w8->add_subcommand("pack", "a float weight W [N, K] -> w8a8_gemm's codes and block parameters");
  auto o = std::make_shared<PackOpts>();
  p->add_option("--weights", o->weights, "W [N, K]: fp32, fp16 or bf16 (.npy, or .safetensors[:name])")->required();
  p->add_option("-o,--out", o->out, "output .safetensors: wq, w_scale (and w_offset, w_sum for int8)")->required();
  p->add_option("--format", o->format, "int8 (default) or e4m3")->check(CLI::IsMember({"int8", "e4m3"}));
  p->add_option("--rule", o->rule, "int8 block rule: offset (default) or symmetric")
      ->check(CLI::IsMember({"offset", "symmetric"}));
  p->add_option("--block", o->block, "codes of k per block (default 128; e4m3: 128 only)");
  p->add_flag("--json", o->json, "JSON summary");
  p->footer(
      "int8: wq int8 [N, K]; w_scale, w_offset (rule offset) float32 and w_sum int32, each [K/block, N].\n"
      "e4m3: wq uint8 [N, K] (e4m3 codes); w_scale float32 [K/128, N/128], one per 128 x 128 tile.");
  p->callback([o, &rc] {
    const io::Tensor wt = io::read_tensor(o->weights);
    const char* type = wt.dtype == io::DType::f32 ? "fp32" : wt.dtype == io::DType::f16 ? "fp16"
                       : wt.dtype == io::DType::bf16 ? "bf16" : nullptr;
    if (!type || wt.shape.size() != 2)
      throw Error("argument", "--weights " + o->weights + " is " + io::dtype_name(wt.dtype) + " of " +
                                  std::to_string(wt.shape.size()) + " dimensions; expected a float32, float16 or "
                                  "bfloat16 matrix [N, K]");
    const int64_t n = wt.shape[0], k = wt.shape[1];
    const auto tensors = pack(*o, tuner::widen_to_float(type, wt.bytes.data(), static_cast<size_t>(n * k)), n, k);
    io::write_safetensors(o->out, tensors, {{"format", "qjit-w8a8-" + o->format}});
    if (o->json) {
      nlohmann::json j = {{"format", o->format}, {"n", n}, {"k", k}, {"block", o->block}, {"out", o->out}};
      for (const auto& [name, t] : tensors) j["tensors"][name] = t.shape;
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << "packed W [" << n << ", " << k << "] as " << o->format << " into " << o->out << ":";
      for (const auto& [name, t] : tensors) std::cout << " " << name;
      std::cout << "\n";
    }
    rc = kOk;
  });
}

}  // namespace qjit::cli
