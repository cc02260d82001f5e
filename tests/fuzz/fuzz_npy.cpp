// Fuzz target: a .npy file (io::parse_npy). Property: a file that parses
// writes back (npy_bytes) to one that parses to the same tensor.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "codegen/error.h"
#include "io/tensor_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto t = qjit::io::parse_npy(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.npy");
    const auto again = qjit::io::parse_npy(qjit::io::npy_bytes(t), "again.npy");
    if (again.dtype != t.dtype || again.shape != t.shape || again.bytes != t.bytes) std::abort();
  } catch (const qjit::Error&) {
  }
  return 0;
}
