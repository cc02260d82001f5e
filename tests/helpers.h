// Test helpers: temporary folders and running the qjit command.
#pragma once
#include <filesystem>
#include <string>

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

}  // namespace qjit::test
