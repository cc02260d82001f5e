// Helpers of the GPU test files (test_gpu*.cpp): fresh seeds, and tuning a
// spec with every candidate required to verify.
#pragma once
#include <cuda.h>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include "cache/store.h"
#include "codegen/spec.h"
#include "qjit/qjit.h"
#include "qjit/qjit_c.h"
#include "tuner/tuner.h"
#include "tuner/workload.h"

namespace qjit::test {

// A seed from the system's random device: every run draws new inputs (the
// failing seed is printed with the failure).
uint64_t fresh_seed();

// The element type named in a quantized spec (scales=, x=, dtype=): fp16, bf16, else fp32.
DType wq_type(const std::string& s);

// Tunes `spec` from scratch with the exhaustive search on fresh random
// inputs and checks that every candidate has a trial and verified; with
// allow_pruned, a candidate pruned for spilling is accepted too, but only
// as the exception. A launch refused for resources is never accepted: the
// legality rules or the runtime are wrong (a block of more than 48 KB of
// shared memory that did not opt in once hid that way).
tuner::TuneReport expect_every_candidate_verifies(cache::Store& store, const codegen::OpSpec& spec, bool allow_pruned,
                                                  int budget_candidates = 0, int max_pruned_percent = 10);

// Tunes `config` alone for `spec` on fresh random inputs into a new cache
// file `db` (so cases that share a spec do not share a row), makes it the
// runtime's cache, and requires the config to win (it verified): the typed
// API then launches exactly that kernel.
void tune_one_config(const std::string& db, const codegen::OpSpec& spec, const nlohmann::json& config);

// A small w8a8_gemm (k=256, n, m=16, block 64: two kernels and a per-stream
// workspace) with its workload's inputs, allocated in the current context.
struct W8a8Case {
  W8a8GemmShape shape;
  std::unique_ptr<tuner::Workload> work;
  W8a8GemmArgs args;
};
W8a8Case w8a8_case(int n);
// The same call's C API struct.
qjit_w8a8_gemm_args c_args(const W8a8Case& c);

// The calling thread's current CUDA context (nullptr: none).
CUcontext current_context();

// Everything written to stderr (file descriptor 2) while f runs.
std::string stderr_of(const std::function<void()>& f);

// An environment variable set for a scope.
struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name.c_str()); }
};

}  // namespace qjit::test
