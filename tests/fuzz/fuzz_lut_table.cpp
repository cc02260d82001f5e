// Fuzz target: a LUT table file (`qjit lut report --table`, lut::from_json).
// Property: a table that loads writes itself back as JSON that loads again
// to the same cut points and values.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/ops/fp_lut_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace lut = qjit::codegen::lut;
  try {
    const auto table = lut::from_json(
        qjit::parse_json_input(std::string_view(reinterpret_cast<const char*>(data), size), "--table"));
    const auto again = lut::from_json(lut::to_json(table));
    if (again.cuts != table.cuts || again.values != table.values) std::abort();
  } catch (const qjit::Error&) {
  }
  return 0;
}
