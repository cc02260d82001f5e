// Fuzz target: a .safetensors header (io::parse_safetensors_header). Every
// tensor it accepts must lie inside the file.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "codegen/error.h"
#include "io/tensor_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto h = qjit::io::parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(data), size),
                                                      size, "fuzz.safetensors");
    for (const auto& [name, e] : h.tensors)
      if (e.begin > e.end || e.end > size) std::abort();
  } catch (const qjit::Error&) {
  }
  return 0;
}
