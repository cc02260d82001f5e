// Test helpers: temporary folders, running the qjit command, compiling
// many candidates.
#pragma once
#include <filesystem>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/nvrtc.h"
#include "codegen/spec.h"

namespace qjit::test {

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

// Path of the qjit binary: next to this test binary (installed layout), else the build tree's.
std::string qjit_binary();
// Runs `qjit <args>` through the shell with QJIT_CACHE pointing at cache_path.
CommandResult run_qjit(const std::string& args, const std::string& cache_path, const std::string& stdin_text = "");

// One candidate to compile, and what came of it (error: generate_source or
// compile threw).
struct CompileJob {
  CompileJob(codegen::OpSpec s, nlohmann::json c) : spec(std::move(s)), config(std::move(c)) {}
  codegen::OpSpec spec;
  nlohmann::json config;
  codegen::CompileResult result;
  std::string error;
};
// Compiles every job for `arch` on two threads; prints "[label] compiled N
// candidates in T s".
void compile_jobs(std::vector<CompileJob>& jobs, const std::string& arch, const std::string& label);

}  // namespace qjit::test
