// Fuzz target: opening a damaged cache file. The input is written as the
// database file; the store opens it, lists, looks up and reads every row, and
// writes one. Anything but success or qjit::Error is a finding.
// QJIT_FUZZ_WRITE_SEED=FILE writes a small valid cache (one kernel, trials,
// an import, a device row) to FILE and exits: the seed corpus, made fresh by
// tests/fuzz/run.sh rather than kept as a binary in the tree.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cache/store.h"
#include "codegen/error.h"

namespace {

qjit::cache::KernelRecord sample() {
  qjit::cache::KernelRecord r;
  r.fp.op = "fused_ffn";
  r.fp.spec_json = R"({"act":"silu","d":256,"dtype":"fp16","h":64,"m":1,"op":"fused_ffn"})";
  r.fp.device.name = "seed GPU";
  r.fp.device.compute_capability = "9.0";
  r.fp.codegen_version = 2;
  r.config = {{"family", "simt"}, {"warps", 4}};
  r.kernel_name = "qjit_fused_ffn";
  r.cubin = std::string("\x7f" "ELF seed", 8);
  r.ptx = ".version 8.0";
  r.source = "// source";
  return r;
}

void remove_files(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* out = std::getenv("QJIT_FUZZ_WRITE_SEED");
  if (!out) return 0;
  remove_files(out);
  {
    qjit::cache::Store s(out);
    const auto rec = sample();
    qjit::cache::TrialRecord t;
    t.key = rec.key();
    t.config = rec.config;
    s.put(rec, {t});
    s.set_copy_bandwidth_gbps("seed", 3000);
    s.add_import({0, "fused_ffn", rec.fp.spec_json, rec.config, {{"format", "qjit-record-v1"}}});
  }  // closing checkpoints the WAL into the one file
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("qjit_fuzz_cache_" + std::to_string(getpid()) + ".db")).string();
  remove_files(path);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    qjit::cache::Store s(path);
    for (const auto& r : s.list(true)) {
      (void)s.lookup(r.key());
      (void)s.trials(r.key());
    }
    (void)s.all_imports();
    (void)s.copy_bandwidth_gbps("seed");
    s.put(sample());
  } catch (const qjit::Error&) {
  }
  remove_files(path);
  return 0;
}
