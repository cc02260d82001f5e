// Cache records from compiles: what the store keeps of a kernel before it is
// timed, built here so that the tuner and the runtime's miss path make them
// the same way. The fingerprint comes from the caller (runtime::fingerprint:
// the spec on this GPU and toolchain).
#pragma once
#include <string>
#include <string_view>
#include <nlohmann/json.hpp>
#include "cache/store.h"
#include "codegen/nvrtc.h"
#include "codegen/source.h"
#include "codegen/spec.h"

namespace qjit::cache {

// A record (no timings) from a successful compile of `config`.
KernelRecord make_record(const Fingerprint& fp, const nlohmann::json& config, codegen::GeneratedSource src,
                         codegen::CompileResult res, bool tuned);
// Compiles `config` for `arch` and fills a record (no timings). Throws
// qjit::Error("nvrtc", log) when it does not compile.
KernelRecord build_record(const Fingerprint& fp, const codegen::OpSpec& spec, const nlohmann::json& config,
                          const std::string& arch, bool tuned);
// The format tag of `qjit export` lines.
inline constexpr const char* kRecordFormat = "qjit-record-v1";

// One `qjit export` line, checked: JSON (nesting limited), the format tag, a
// spec that parses and a config legal for it. Throws qjit::Error naming what
// is wrong.
struct RecordLine {
  codegen::OpSpec spec;
  nlohmann::json config;
  nlohmann::json record;  // the whole line
};
RecordLine parse_record_line(std::string_view line);

// Writes <dir>/<op>_<key12>.{cu,ptx,log} when QJIT_DUMP_DIR is set.
void dump_if_requested(const KernelRecord& rec);

}  // namespace qjit::cache
