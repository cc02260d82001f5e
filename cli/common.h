// Shared pieces of the qjit command: exit codes, spec options, output helpers.
#pragma once
#include <string>
#include <vector>
#include <CLI/CLI.hpp>
#include "cache/store.h"
#include "codegen/spec.h"

namespace qjit::cli {

// Documented in `qjit --help` and docs/cli.md ("Exit codes and output").
enum Exit : int {
  kOk = 0,
  kFailed = 1,     // the command ran and failed (compile error, no verified candidate, cache error)
  kUsage = 2,      // bad arguments: unknown op, malformed --shape, bad value
  kNoGpu = 3,      // needs a GPU and none is usable; the GPU-free part was done
  kNotFound = 4,   // nothing cached matches
};

inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok, 1 failed, 2 bad arguments, 3 no usable GPU (GPU-free part done), 4 nothing cached matches.";

// --op / --shape / --dtype / --m, expanded into one spec per m.
struct SpecOptions {
  std::string op = "fused_ffn";
  std::string shape;
  std::string dtype;
  std::string m;  // "1", "1,2,4", "1-8"
  void add_to(CLI::App* app, bool shape_required);
  std::vector<codegen::OpSpec> specs() const;  // throws qjit::Error("spec", ...)
};

struct CacheOption {
  std::string path;
  void add_to(CLI::App* app);
  std::string resolved() const { return path.empty() ? cache::Store::default_path() : path; }
};

// The whole of an input file named by `option` ("-": standard input);
// throws Error("argument") naming the option and path when it is missing, a
// folder, or unreadable.
std::string read_input_file(const std::string& option, const std::string& path);

std::string fmt(const char* format, ...);
// "2.1 MB"
std::string human_bytes(double bytes);

// Commands; each returns an exit code.
void add_tune(CLI::App& app, int& rc);
void add_bench(CLI::App& app, int& rc);
void add_source(CLI::App& app, int& rc);
void add_list(CLI::App& app, int& rc);
void add_show(CLI::App& app, int& rc);
void add_doctor(CLI::App& app, int& rc);
void add_export(CLI::App& app, int& rc);
void add_import(CLI::App& app, int& rc);
void add_repack(CLI::App& app, int& rc);
void add_lut(CLI::App& app, int& rc);
void add_gru(CLI::App& app, int& rc);
void add_w8a8(CLI::App& app, int& rc);
void add_ops(CLI::App& app, int& rc);

}  // namespace qjit::cli
