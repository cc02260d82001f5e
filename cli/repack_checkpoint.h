// qjit repack --checkpoint: a whole AWQ/GPTQ .safetensors checkpoint to
// wq_gemm's native layout (cli/repack_checkpoint.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/tensor_file.h"

namespace qjit::cli {

struct CheckpointOptions {
  std::string checkpoint;  // the .safetensors file
  std::string config;      // its config.json (quantization_config), or ""
  std::string from;        // "awq" | "gptq" | "" (from the config)
  bool sym = false, gptq_v1 = false;
};

struct CheckpointRepack {
  // Per layer PREFIX.qweight (native), PREFIX.zeros, PREFIX.scales; then every
  // other tensor of the checkpoint, unchanged.
  std::map<std::string, io::Tensor> tensors;
  std::vector<nlohmann::json> manifest;        // {"op", "shape", "layers"} per distinct wq_gemm spec
  std::string from;
  size_t layers = 0;
  size_t carried = 0;  // tensors carried over unchanged
};

// Reads and converts every layer; throws Error("argument") naming the tensor
// and what is wrong before anything is written.
CheckpointRepack repack_checkpoint(const CheckpointOptions& options);

}  // namespace qjit::cli
