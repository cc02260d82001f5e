// From spec to a launchable function: in-memory map → SQLite store → JIT.
//
//   get(spec): 1. the in-memory map (hot path: no SQLite, no hashing of JSON)
//              2. the store, by fingerprint key (checksum verified on load)
//              3. miss: the op's heuristic default config, compiled with NVRTC
//                 for this GPU and stored marked untuned.
#pragma once
#include <cuda.h>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <nlohmann/json.hpp>
#include "cache/store.h"
#include "codegen/nvrtc.h"
#include "codegen/op.h"
#include "codegen/spec.h"

namespace qjit::runtime {

// The scratch memory of a kernel whose geometry asks for it (e.g. the
// balanced wq_gemm's counters and partial sums): one buffer per stream, so
// launches on different streams never share one; allocated and zeroed on
// the stream's first launch (so not inside a CUDA graph capture: launch once
// before capturing), freed with the kernel.
class Workspaces {
 public:
  explicit Workspaces(size_t bytes) : bytes_(bytes) {}
  ~Workspaces();
  Workspaces(const Workspaces&) = delete;
  Workspaces& operator=(const Workspaces&) = delete;
  // The stream's buffer; allocates and queues its zeroing on `stream` the first time.
  CUresult get(CUstream stream, CUdeviceptr* out);

 private:
  size_t bytes_;
  std::mutex mu_;
  std::unordered_map<CUstream, CUdeviceptr> buffers_;
};

struct LoadedKernel {
  std::string key;               // fingerprint key
  nlohmann::json config;
  bool tuned = false;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  codegen::LaunchGeometry geometry;
  std::vector<codegen::PointerArg> pointers;  // checked by launch_checked
  bool programmatic = false;                   // geometry.programmatic on an sm_90+ device
  std::shared_ptr<Workspaces> workspaces;      // when geometry asks for workspace bytes
  CUfunction epilogue = nullptr;               // `<kernel>_epilogue`, when geometry.dense_gemm has slabs
};

// For this process's GPU, once k.function is set: a persistent grid's size
// (geometry.grid_per_sm × SMs), the shared memory that holds a persistent or
// spread grid to its blocks per SM (smem_share_for), the opt-in above 48 KB
// of shared memory, and the kernel's workspaces (geometry.workspace_*).
void resolve_for_device(LoadedKernel& k);

// What an SM offers and a kernel takes of shared memory, in bytes.
struct SmemBudget {
  int per_sm = 0, per_block_optin = 0, reserved_per_block = 0;  // the device's
  int static_bytes = 0;                                         // the kernel's
};
// Dynamic shared memory that lets at most `blocks_per_sm` blocks share an SM
// (each takes its share, 128 bytes left for rounding), never more than one
// block may ask for; 0 when the share is used up by static memory.
unsigned smem_share_for(int blocks_per_sm, const SmemBudget& b);

// Everything of the cache key except the spec, for this process's GPU and toolchain.
cache::Fingerprint fingerprint(const codegen::OpSpec& spec);
std::string templates_hash();

// Writes <dir>/<op>_<key12>.{cu,ptx,log} when QJIT_DUMP_DIR is set.
void dump_if_requested(const cache::KernelRecord& rec);

// A record (no timings) from a successful compile of `config`.
cache::KernelRecord make_record(const codegen::OpSpec& spec, const nlohmann::json& config,
                                codegen::GeneratedSource src, codegen::CompileResult res, bool tuned);
// Compiles `config` for this GPU and fills a record (no timings). Throws
// qjit::Error("nvrtc", log) when it does not compile.
cache::KernelRecord build_record(const codegen::OpSpec& spec, const nlohmann::json& config, bool tuned);

// Loads a record's cubin. Throws qjit::Error("driver", ...) on failure.
LoadedKernel load_record(const cache::KernelRecord& rec, const codegen::OpSpec& spec);

// args: the kernel's parameters, except the workspace (the last one, which
// the runtime fills with the stream's) when the kernel has one. With
// geometry.dense_gemm, the cuBLAS steps that follow the kernel too.
void launch(const LoadedKernel& k, void** args, CUstream stream);
// launch() without throwing: the driver's result (the tuner records
// failures); CUDA_ERROR_NOT_SUPPORTED, nothing launched, where a dense_gemm
// kernel finds no cuBLAS (dense_gemm_unavailable says why), and
// CUDA_ERROR_UNKNOWN where cuBLAS fails after the kernel.
CUresult try_launch(const LoadedKernel& k, void** args, CUstream stream);
// Why a kernel whose geometry has a dense_gemm cannot run here (no
// libcublas, or no handle), or "" when it can.
std::string dense_gemm_unavailable(CUstream stream);
// An entry point's pointer arguments, in launch order, with its name for errors.
struct LaunchPointers {
  const char* op;
  std::initializer_list<const void*> values;
};
// Every pointer non-null and aligned as a config's pointer arguments need
// (null only where the spec does not read it): qjit::Error("argument", ...)
// naming the first bad one otherwise.
void check_pointers(const std::vector<codegen::PointerArg>& want, const LaunchPointers& p);

// The entry points' launch: check_pointers against the kernel's config
// (nothing launched when one is bad), then launch with the pointers, then
// `ints`, as the kernel's parameters.
void launch_checked(const LoadedKernel& k, const LaunchPointers& p, CUstream stream, std::initializer_list<int> ints = {});

class KernelCache {
 public:
  // The process-wide cache on Store::default_path() (or set_path()).
  static KernelCache& instance();
  void set_path(const std::string& path);  // drops what is loaded
  std::string path();

  // fast_key: a cheap string unique per spec, built by the typed entry point
  // without JSON; make_spec runs only on the first call per fast_key. With
  // `check`, a kernel not loaded yet has the launch's pointers checked
  // against the config it would load before anything is compiled or stored:
  // bad input leaves the cache as it was (launch_checked checks them again
  // on every launch).
  template <typename MakeSpec>
  const LoadedKernel& get(const std::string& fast_key, MakeSpec&& make_spec, const LaunchPointers* check = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = loaded_.find(fast_key);
      if (it != loaded_.end()) return *it->second;
    }
    return get_slow(fast_key, make_spec(), check);
  }

 private:
  const LoadedKernel& get_slow(const std::string& fast_key, const codegen::OpSpec& spec, const LaunchPointers* check);
  cache::Store& store();

  std::mutex mu_;
  std::string path_;
  std::unique_ptr<cache::Store> store_;
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> loaded_;
};

}  // namespace qjit::runtime
