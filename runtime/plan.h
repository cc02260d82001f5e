// A loaded plan (codegen/op.h "Plan"): the module of one config, its kernels
// resolved for this GPU, and the steps of one call, run on the caller's
// stream with the call's arguments.
//
// The arguments of a call travel as an ArgPack (qjit/qjit.h): one value per
// ArgDef of the op, in the order of the op's argument struct, which packs
// itself (the one place its fields meet positions); kernels,
// tensor maps, pointer checks and library steps name arguments, and loading
// resolves those names to positions once.
#pragma once
#include <cuda.h>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/op.h"
#include "qjit/qjit.h"

namespace qjit::runtime {

using ArgPack = qjit::ArgPack;

// The scratch memory of a plan whose steps ask for it (e.g. the balanced
// wq_gemm's counters and partial sums, the dequantised W before cuBLAS): one
// buffer per stream, so calls on different streams never share one;
// allocated and zeroed on the stream's first call (so not inside a CUDA graph
// capture: call once before capturing), freed with the plan.
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

// A kernel parameter or tensor-map source resolved to an argument's position.
struct ResolvedParam {
  codegen::KernelParam::Kind kind;
  int arg = -1;       // position in the ArgPack
  size_t offset = 0;  // workspace offset
};
struct ResolvedMap {
  codegen::TensorMap map;
  int source = -1, rows = -1;  // positions in the ArgPack (source -1: the map is in the workspace)
};
// A library step's argument positions; -1 where the step does not use one
// (w: W in the workspace; rows: the step's fixed_rows). A cuBLASLt step
// uses w, bias, y and rows.
struct ResolvedGemm {
  int x = -1, w = -1, bias = -1, residual = -1, y = -1, rows = -1;
};
struct ResolvedCheck {
  codegen::PointerArg want;
  int arg = -1;
};

struct LoadedKernel {
  CUfunction function = nullptr;
  codegen::KernelDef def;  // its geometry resolved for this GPU (resolve_for_device)
  bool programmatic = false;  // geometry.programmatic on an sm_90+ device (and QJIT_PDL not 0)
  std::vector<ResolvedParam> params;
  std::vector<ResolvedMap> maps;
};

class LtFp8Gemm;  // runtime/cublaslt.h

struct LoadedPlan {
  std::string op;
  std::string key;  // fingerprint key
  nlohmann::json config;
  bool tuned = false;
  CUmodule module = nullptr;
  std::vector<codegen::ArgDef> args;
  std::vector<LoadedKernel> kernels;  // as codegen::Plan::kernels
  std::vector<codegen::PlanStep> steps;
  std::vector<ResolvedGemm> gemms;  // per step: its library call's arguments (cublas_gemm, cublaslt_fp8_gemm steps)
  std::vector<std::shared_ptr<LtFp8Gemm>> lt_gemms;  // per step: a cublaslt_fp8_gemm step's state, else null
  bool needs_cublas = false, needs_cublaslt = false;
  std::vector<ResolvedCheck> checks;
  std::shared_ptr<Workspaces> workspaces;  // when the plan needs workspace bytes
};

// The byte sizes of the parameters a launch of `kd` passes, in order: 4 for
// an int (an int argument, the iteration), 8 for a pointer, a CUtensorMap's
// 128 for each map. load_plan compares them with the cubin's declaration.
std::vector<size_t> plan_param_sizes(const codegen::KernelDef& kd, const std::vector<codegen::ArgDef>& args,
                                     const std::string& op);

// Position of argument `name` among `args`; throws Error("codegen", ...) when absent.
int arg_position(const std::vector<codegen::ArgDef>& args, const std::string& name, const std::string& op);

// Loads a compiled module and resolves `plan` against it for this GPU: each
// kernel's function, a persistent grid's size (grid_per_sm × SMs), the
// shared memory that holds a persistent or spread grid to its blocks per SM
// (smem_share_for), the opt-in above 48 KB, the workspace; then runs the
// init kernels once. Throws qjit::Error("driver", ...) on failure (nothing
// stays loaded then).
LoadedPlan load_plan(const std::string& op, const codegen::Plan& plan, const std::string& cubin);

// What an SM offers and a kernel takes of shared memory, in bytes.
struct SmemBudget {
  int per_sm = 0, per_block_optin = 0, reserved_per_block = 0;  // the device's
  int static_bytes = 0;                                         // the kernel's
};
// Dynamic shared memory that lets at most `blocks_per_sm` blocks share an SM
// (each takes its share, 128 bytes left for rounding), never more than one
// block may ask for; 0 when the share is used up by static memory.
unsigned smem_share_for(int blocks_per_sm, const SmemBudget& b);
// The geometry of a kernel whose function is set, for this process's GPU (above).
void resolve_for_device(LoadedKernel& k);

// Every pointer non-null and aligned as the plan's checks need (null only
// where the spec does not read it): qjit::Error("argument", ...) naming the
// first bad one otherwise. Also checks the pack against the op's arguments.
void check_pointers(const LoadedPlan& p, const ArgPack& a);
// The same checks for a plan not loaded yet (the op's args and the plan's pointers).
void check_pointers(const std::vector<codegen::ArgDef>& args, const codegen::Plan& plan, const ArgPack& a);

// `function` on `geometry` with `params` as given, with programmatic
// dependent launch when `programmatic`: how every step kernel is launched
// (the probes launch their own kernels with it).
CUresult launch_function(CUfunction function, const codegen::LaunchGeometry& geometry, bool programmatic,
                         void** params, CUstream stream);
// Kernel `kernel` of the plan with the call's arguments (its params, then its
// tensor maps); `iteration` is what an iteration param receives.
CUresult launch_kernel(const LoadedPlan& p, int kernel, const ArgPack& a, CUstream stream, int iteration = 0);
// Every step of the plan in order, on `stream`: what one call of the op
// does unless its runtime/ops file composes its steps otherwise. Returns
// CUDA_ERROR_NOT_SUPPORTED, nothing launched, where a cuBLAS step finds no
// cuBLAS (plan_unavailable says why), and CUDA_ERROR_UNKNOWN where cuBLAS fails.
CUresult run_steps(const LoadedPlan& p, const ArgPack& a, CUstream stream);
// Why the plan's library steps cannot run here (no libcublas or libcublasLt, or no handle), or "" when they can.
std::string plan_unavailable(const LoadedPlan& p, CUstream stream);
// Why cuBLAS cannot run on `stream` here, or "" when it can.
std::string cublas_unavailable(CUstream stream);

// An op's composition of one call (runtime/ops/<op>.cpp: run_<op>).
using RunPlan = CUresult (*)(const LoadedPlan&, const ArgPack&, CUstream);
// `run` and a thrown qjit::Error on failure: the typed entry points' launch,
// after check_pointers.
// Under qjit::Preload (begin_preload … end_preload on this thread) it makes
// the stream's workspace and cuBLAS handle ready instead and launches nothing.
void run_checked(RunPlan run, const LoadedPlan& p, const ArgPack& a, CUstream stream);
void begin_preload();
void end_preload();

// Unloads the plan's module when it goes out of scope (the tuner's candidates).
struct PlanGuard {
  const LoadedPlan& p;
  ~PlanGuard();
};

}  // namespace qjit::runtime
