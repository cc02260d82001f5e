// Fuzz target: one line of a `qjit import` file (cache::parse_record_line).
#include <cstdint>
#include <string_view>

#include "cache/record.h"
#include "codegen/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)qjit::cache::parse_record_line(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const qjit::Error&) {
  }
  return 0;
}
