// The files of `qjit gru`: a PyTorch GRU's float weights (one .safetensors
// file or a folder of .npy files), float or integer activations, and the
// quantized weights W, R, bw, br. Every problem is an Error("argument", ...)
// naming the option, the file and what is wrong with it (exit code 2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/ops/gru_params.h"
#include "io/tensor_file.h"
#include "tuner/gru_float.h"
#include "tuner/reference/gru_quant.h"

namespace qjit::cli {

// A tensor file (a .npy, or a .safetensors holding one tensor or named as
// FILE:NAME) read for `option`.
io::Tensor read_tensor_for(const std::string& option, const std::string& path);

// The values of a float16, bfloat16, float32 or float64 tensor, widened.
std::vector<double> float_values(const io::Tensor& t, const std::string& what);
// The values of an int32 tensor.
std::vector<int32_t> int32_values(const io::Tensor& t, const std::string& what);
// "[2, 3, 4]"
std::string shape_text(const std::vector<int64_t>& shape);

// Layer 0 of a torch.nn.GRU: weight_ih_l0, weight_hh_l0, bias_ih_l0 and
// bias_hh_l0 as its state dict names them, each possibly under a prefix
// ("gru.weight_ih_l0"), from one .safetensors file or a folder of
// NAME.npy files. Sizes are checked against each other; `names` receives
// the names found (for messages).
tuner::GruFloatWeights read_torch_gru(const std::string& option, const std::string& path,
                                      std::vector<std::string>* names = nullptr);

// The quantized weights: W and R int8 [3H][C] and [3H][H], bw and br int32
// [3H], gate rows u, r, n; written under those names, read back with their
// shapes, dtypes and values checked against the params.
void write_gru_weights(const std::string& path, const tuner::GruWeights& w, int64_t input_size, int64_t hidden_size);
tuner::GruWeights read_gru_weights(const std::string& option, const std::string& path,
                                   const codegen::gru::GruParams& p);

// A [T][N][width] or [N][width] activation for `option`: int32 codes (checked
// against q's range) or floats quantized with q. `saturated` counts float
// values that fell outside q's range.
struct Activation {
  std::vector<int64_t> shape;
  std::vector<int32_t> codes;
  bool was_float = false;
  int64_t saturated = 0;
};
Activation read_activation(const std::string& option, const std::string& path, const codegen::gru::QTensor& q,
                           size_t rank, int64_t width, const std::string& layout);

}  // namespace qjit::cli
