#include "tests/helpers.h"
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>
#include "codegen/source.h"

namespace qjit::test {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path = std::filesystem::temp_directory_path() /
         ("qjit_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" +
          std::to_string(std::random_device{}()));
  std::filesystem::create_directories(path);
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string qjit_binary() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto sibling = self.parent_path() / "qjit";
    if (std::filesystem::exists(sibling)) return sibling.string();
  }
  return QJIT_CLI_BUILD_PATH;
}

static std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CommandResult run_command(const std::string& command_line, const std::string& stdin_text) {
  TempDir io;
  const std::string in = io.file("in"), out = io.file("out"), err = io.file("err");
  std::ofstream(in) << stdin_text;
  const std::string cmd = "( " + command_line + " ) <'" + in + "' >'" + out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

CommandResult run_qjit_env(const std::string& env, const std::string& args, const std::string& cache_path,
                           const std::string& stdin_text) {
  return run_command(env + " QJIT_CACHE='" + cache_path + "' '" + qjit_binary() + "' " + args, stdin_text);
}

CommandResult run_qjit(const std::string& args, const std::string& cache_path, const std::string& stdin_text) {
  return run_qjit_env("", args, cache_path, stdin_text);
}

Sample compile_sample(size_t stride, const std::string& label) {
  const char* env = std::getenv("QJIT_TEST_EXHAUSTIVE");
  if (env && std::string(env) == "1") return {stride, 0};
  Sample s{stride * 4, 0};
  s.offset = std::random_device{}() % s.stride;
  std::cout << "[" << label << "] every " << s.stride << "th candidate from " << s.offset
            << " (QJIT_TEST_EXHAUSTIVE=1: every " << stride << "th)\n";
  return s;
}

void compile_jobs(std::vector<CompileJob>& jobs, const std::string& arch, const std::string& label) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      try {
        jobs[i].result = codegen::compile(codegen::generate_source(jobs[i].spec, jobs[i].config), arch);
      } catch (const std::exception& e) {
        jobs[i].error = e.what();
      }
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::thread a(worker), b(worker);
  a.join(), b.join();
  std::cout << "[" << label << "] compiled " << jobs.size() << " candidates in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
}

}  // namespace qjit::test
