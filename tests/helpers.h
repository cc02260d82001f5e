// Test helpers: temporary folders, running the qjit command, compiling
// many candidates.
#pragma once
#include <filesystem>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/op.h"
#include "codegen/spec.h"

namespace qjit::test {

// Occurrences of `what` in `text` (generated code, a QJIT_LOG=1 stderr).
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The first step kernel of a config's plan (the only one of a single-kernel
// plan), and its geometry.
inline codegen::KernelDef main_kernel(const codegen::OpDef& op, const codegen::OpSpec& spec,
                                      const nlohmann::json& config) {
  return op.plan(spec, config).main_kernel();
}
// Whether parameter i of a kernel is the plan's workspace.
inline bool is_workspace(const codegen::KernelDef& k, size_t i) {
  return i < k.params.size() && k.params[i].kind == codegen::KernelParam::Kind::workspace;
}
inline codegen::LaunchGeometry geometry_of(const codegen::OpDef& op, const codegen::OpSpec& spec,
                                           const nlohmann::json& config) {
  return main_kernel(op, spec, config).geometry;
}

// A fresh folder under the system temp dir, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  TempDir();
  ~TempDir();
  std::string file(const std::string& name) const { return (path / name).string(); }
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// What f throws as qjit::Error (its what()), or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Path of the qjit binary: next to this test binary (installed layout), else the build tree's.
std::string qjit_binary();
// Runs a shell command line, stdin from stdin_text, stdout and stderr captured.
CommandResult run_command(const std::string& command_line, const std::string& stdin_text = "");
// Runs `qjit <args>` through the shell with QJIT_CACHE pointing at cache_path.
CommandResult run_qjit(const std::string& args, const std::string& cache_path, const std::string& stdin_text = "");
// The same with environment assignments first ("QJIT_LOG=1 CUDA_VISIBLE_DEVICES=").
CommandResult run_qjit_env(const std::string& env, const std::string& args, const std::string& cache_path,
                           const std::string& stdin_text = "");

// One candidate to compile, and what came of it (error: generate_source or
// compile threw).
struct CompileJob {
  CompileJob(codegen::OpSpec s, nlohmann::json c) : spec(std::move(s)), config(std::move(c)) {}
  codegen::OpSpec spec;
  nlohmann::json config;
  codegen::CompileResult result;
  std::string error;
};
// Which items of a long compile list a run takes: every stride-th from a
// fresh random offset, stride multiplied by 4 unless QJIT_TEST_EXHAUSTIVE=1
// (then the given stride, offset 0). Runs in turn cover the whole list while
// the CPU suite stays within CI's time; the offset is printed with `label`.
struct Sample {
  size_t stride = 1, offset = 0;
  bool takes(size_t i) const { return i % stride == offset; }
};
Sample compile_sample(size_t stride, const std::string& label);

// Compiles every job for `arch` on two threads; prints "[label] compiled N
// candidates in T s".
void compile_jobs(std::vector<CompileJob>& jobs, const std::string& arch, const std::string& label);

}  // namespace qjit::test
