// Fuzz target: --shape strings and --m lists (cli::SpecOptions), for every op.
// Input: "<op>\n<shape>\n<m>". Property: a spec that parses round-trips
// through its shape string and its canonical JSON unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/spec.h"

namespace {
std::string_view next_line(std::string_view& in) {
  const size_t nl = in.find('\n');
  const std::string_view line = in.substr(0, nl);
  in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  return line;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  qjit::cli::SpecOptions o;
  o.op = std::string(next_line(in));
  o.shape = std::string(next_line(in));
  o.m = std::string(in);
  try {
    for (const auto& spec : o.specs()) {
      const auto again = qjit::codegen::parse_spec(spec.op, spec.shape_string());
      const auto from_json =
          qjit::codegen::spec_from_json(qjit::parse_json_input(spec.canonical_json(), "canonical spec"));
      if (again.canonical_json() != spec.canonical_json() || from_json.canonical_json() != spec.canonical_json())
        std::abort();  // a spec that does not survive its own round trip
      (void)spec.label();
    }
  } catch (const qjit::Error&) {
  }
  return 0;
}
