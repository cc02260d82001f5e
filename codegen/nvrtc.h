// NVRTC wrapper: generated source -> cubin + PTX + log + resource usage, for
// the current GPU or an explicit sm_XX (no GPU needed). Every handle is freed
// by a scope guard; a failed compile is returned as ok=false with the log
// (annotated with template file:line), never as a later load error.
#pragma once
#include <string>
#include "codegen/source.h"

namespace qjit::codegen {

struct CompileResult {
  bool ok = false;
  std::string arch;     // "sm_90"
  std::string cubin;    // binary
  std::string ptx;
  std::string log;      // NVRTC + ptxas log, errors annotated with their template line
  double compile_ms = 0;
  // From ptxas -v; -1 when not reported.
  int registers = -1, spill_bytes = -1, shared_bytes = -1, stack_bytes = -1;
};

// arch: "sm_80", "sm_90", ... Throws qjit::Error("nvrtc", ...) for a bad arch
// string or an NVRTC API failure; a compile error is ok=false.
CompileResult compile(const GeneratedSource& src, const std::string& arch);

std::string nvrtc_version();                  // "13.0"
// Everything a compile depends on besides the source and the arch: the NVRTC
// version, the options and every header a source may include (their text).
// cache::CompileCache keys its rows by a hash of it.
std::string compile_identity();
bool nvrtc_supports_arch(const std::string& arch);

}  // namespace qjit::codegen
