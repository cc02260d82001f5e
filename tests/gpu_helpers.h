// Helpers of the GPU test files (test_gpu*.cpp): fresh seeds, and tuning a
// spec with every candidate required to verify.
#pragma once
#include <cstdint>
#include <string>
#include "cache/store.h"
#include "codegen/spec.h"
#include "qjit/qjit.h"
#include "tuner/tuner.h"

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

}  // namespace qjit::test
