// Tensors in the two file formats checkpoints and calibration data come in:
// NumPy .npy (format versions 1-3, little-endian, C order) and .safetensors
// (an 8-byte little-endian header length, a JSON header of
// {name: {dtype, shape, data_offsets}}, then the data). Both are read with
// every size and offset checked against the file; a bad file gives
// Error("io", ...) naming it and what is wrong, never a crash.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace qjit::io {

enum class DType { i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64, boolean };
size_t dtype_size(DType t);
std::string dtype_name(DType t);  // "int32", "float16", ...

struct Tensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::string bytes;  // elements() · dtype_size(dtype) bytes, little-endian, C order
  int64_t elements() const;
};

// 32-bit words and their little-endian bytes (packed int4 tensors are such words).
std::vector<uint32_t> le32_words(std::string_view bytes);  // bytes.size() / 4 words
std::string le32_bytes(const std::vector<uint32_t>& words);

// .npy
Tensor parse_npy(std::string_view file, const std::string& what);
std::string npy_bytes(const Tensor& t);  // format version 1.0 (2.0 when the header needs it)

// .safetensors: where each tensor lies in the file.
struct TensorEntry {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the file (header included)
};
struct SafetensorsHeader {
  std::map<std::string, TensorEntry> tensors;
  nlohmann::json metadata;  // "__metadata__", or null
};
// Parses the header at the start of `file_start` (at least its first 8 bytes
// plus the header) for a file of `file_size` bytes.
SafetensorsHeader parse_safetensors_header(std::string_view file_start, uint64_t file_size, const std::string& what);
std::string safetensors_bytes(const std::map<std::string, Tensor>& tensors, const nlohmann::json& metadata = nullptr);

// Files. A tensor path is "file.npy", "file.safetensors:name", or
// "file.safetensors" holding exactly one tensor. Writers go through a
// temporary and a rename, so a reader never sees half a file.
Tensor read_tensor(const std::string& path);
SafetensorsHeader read_safetensors_header(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const nlohmann::json& metadata = nullptr);
// True when the path names a .npy or .safetensors file (by its extension, before any ":name").
bool is_tensor_path(const std::string& path);
// The file of a tensor path ("a.safetensors:name" -> "a.safetensors"; others unchanged).
std::string file_of(const std::string& path);

}  // namespace qjit::io
