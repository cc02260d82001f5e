#include "runtime/plan.h"
#include <algorithm>
#include <cstdlib>
#include "codegen/error.h"
#include "codegen/registry.h"
#include "runtime/cublas.h"
#include "runtime/cublaslt.h"
#include "runtime/device.h"
#include "runtime/driver.h"

namespace qjit::runtime {
namespace {

// QJIT_PDL=0 turns programmatic dependent launch off (every launch then
// waits for the previous kernel of the stream to finish, as plain launches do).
bool programmatic_launch_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("QJIT_PDL");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

constexpr int kMaxParams = 16;

}  // namespace

Workspaces::~Workspaces() {
  for (auto& [stream, ptr] : buffers_) driver().cuMemFree(ptr);  // at exit the context may be gone: nothing to do then
}

CUresult Workspaces::get(CUstream stream, CUdeviceptr* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(stream);
  if (it != buffers_.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  CUdeviceptr p = 0;
  CUresult r = driver().cuMemAlloc(&p, bytes_);
  if (r != CUDA_SUCCESS) return r;
  r = driver().cuMemsetD8Async(p, 0, bytes_, stream);  // ordered before the launch that follows on the stream
  if (r != CUDA_SUCCESS) {
    driver().cuMemFree(p);
    return r;
  }
  buffers_.emplace(stream, p);
  *out = p;
  return CUDA_SUCCESS;
}

unsigned smem_share_for(int blocks_per_sm, const SmemBudget& b) {
  const int share = b.per_sm / std::max(1, blocks_per_sm) - b.reserved_per_block - b.static_bytes - 128;
  return static_cast<unsigned>(std::max(0, std::min(share, b.per_block_optin - b.static_bytes)));
}

void resolve_for_device(LoadedKernel& k) {
  auto& g = k.def.geometry;
  const Device& dev = current_device();
  int static_smem = 0;
  QJIT_CU(cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k.function));
  const SmemBudget budget{dev.smem_per_sm, dev.smem_per_block_optin, dev.smem_reserved_per_block, static_smem};
  if (g.grid_per_sm > 0) {
    g.grid[0] = g.grid_per_sm * static_cast<unsigned>(dev.identity.sm_count);
    if (g.max_grid > 0) g.grid[0] = std::min(g.grid[0], g.max_grid);
    // Exactly grid_per_sm blocks on every SM: each block takes its share of
    // the SM's shared memory (used or not), so no SM can hold one more. The
    // block scheduler otherwise fills the SMs that the previous grid freed
    // first: a persistent grid of 2 blocks per SM ran 3 blocks on 63 SMs of
    // an H100, 1 on 37 and none on 13 (qjit_timeline_probe), and SMs with 3
    // finished 5 µs after those with 1. The kernel's static shared memory
    // counts towards the share. Never less than the kernel needs: a share
    // below it (wgmma's stream schedule at 3 blocks of 77 KB: 75 KB each)
    // ran the ring past its end (CUDA_ERROR_ILLEGAL_ADDRESS); then fewer
    // blocks fit on an SM, and the grid still completes (a block waits only
    // for blocks dispatched before it).
    if (g.claim_sm_share)
      g.dynamic_smem = std::max(g.dynamic_smem, smem_share_for(static_cast<int>(g.grid_per_sm), budget));
  } else if (g.spread) {
    // At most ceil(blocks / SMs) blocks per SM by the same share
    // (codegen/op.h): padding only, never less than the kernel uses.
    const int64_t blocks = int64_t{g.grid[0]} * g.grid[1] * g.grid[2], sms = dev.identity.sm_count;
    g.dynamic_smem = std::max(g.dynamic_smem, smem_share_for(static_cast<int>((blocks + sms - 1) / sms), budget));
  }
  // Above 48 KB of static and dynamic shared memory together a kernel must
  // opt in; without it the launch fails (CUDA_ERROR_INVALID_VALUE). Testing
  // the dynamic part alone let the tuner drop every ring of 48 KB or less
  // whose split-k sums pushed the block past 48 KB (8 warps of 4 stages at
  // M = 16, 52 KB) as a resource error.
  if (g.dynamic_smem > 0 && static_cast<unsigned>(static_smem) + g.dynamic_smem > 48 * 1024)
    QJIT_CU(cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(g.dynamic_smem)));
  if (g.cluster_non_portable)
    QJIT_CU(cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  k.programmatic = g.programmatic && programmatic_launch_enabled() &&
                   std::stoi(dev.identity.compute_capability) >= 9;
}

std::vector<size_t> plan_param_sizes(const codegen::KernelDef& kd, const std::vector<codegen::ArgDef>& args,
                                     const std::string& op) {
  std::vector<size_t> sizes;
  for (const auto& p : kd.params) {
    const bool is_int = p.kind == codegen::KernelParam::Kind::iteration ||
                        (p.kind == codegen::KernelParam::Kind::arg &&
                         args[static_cast<size_t>(arg_position(args, p.arg, op))].kind == codegen::ArgDef::Kind::int32);
    sizes.push_back(is_int ? 4 : 8);  // an int, or a device pointer (an argument's or into the workspace)
  }
  for (size_t m = 0; m < kd.tensor_maps.size(); ++m) sizes.push_back(sizeof(CUtensorMap));
  return sizes;
}

namespace {

std::string list_sizes(const std::vector<size_t>& sizes) {
  std::string s = "(";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + ")";
}

// The kernel's parameters as its cubin declares them (cuFuncGetParamInfo)
// against what the plan passes: a parameter missing, extra or of another size
// would make the launch read the wrong bytes, so the load fails instead,
// naming the kernel and both lists. Skipped on drivers older than 12.4.
void check_params_against_cubin(const codegen::KernelDef& kd, CUfunction f, const std::vector<codegen::ArgDef>& args,
                                const std::string& op) {
  const auto info = driver().cuFuncGetParamInfo;
  if (!info) return;
  std::vector<size_t> declared;
  size_t offset = 0, size = 0;
  while (declared.size() <= static_cast<size_t>(kMaxParams) && info(f, declared.size(), &offset, &size) == CUDA_SUCCESS)
    declared.push_back(size);
  const std::vector<size_t> passed = plan_param_sizes(kd, args, op);
  if (declared != passed)
    throw Error("codegen", op + " kernel " + kd.symbol + " declares parameters of " + list_sizes(declared) +
                               " bytes; its plan passes " + list_sizes(passed));
}

}  // namespace

int arg_position(const std::vector<codegen::ArgDef>& args, const std::string& name, const std::string& op) {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name == name) return static_cast<int>(i);
  throw Error("codegen", op + "'s plan names argument '" + name + "', which the op does not have");
}

LoadedPlan load_plan(const std::string& op, const codegen::Plan& plan, const std::string& cubin) {
  const auto& def = codegen::find_op(op);
  LoadedPlan p;
  p.op = op;
  p.args = def.args();
  p.steps = plan.steps;
  p.needs_cublas = plan.needs_cublas();
  p.needs_cublaslt = plan.needs_cublaslt();
  for (const auto& c : plan.pointers) p.checks.push_back({c, arg_position(p.args, c.name, op)});
  const auto position = [&](const std::string& name) { return arg_position(p.args, name, op); };
  const auto optional = [&](const std::string& name) { return name.empty() ? -1 : position(name); };
  for (const auto& s : plan.steps) {
    ResolvedGemm g;
    std::shared_ptr<LtFp8Gemm> lt;
    if (s.kind == codegen::PlanStep::Kind::cublas_gemm) {
      g = {position(s.gemm.x), optional(s.gemm.w),        optional(s.gemm.bias),
           optional(s.gemm.residual), optional(s.gemm.y), optional(s.gemm.rows)};
    } else if (s.kind == codegen::PlanStep::Kind::cublaslt_fp8_gemm) {
      g = {-1, position(s.lt.w), optional(s.lt.bias), -1, position(s.lt.y), position(s.lt.rows)};
      lt = std::make_shared<LtFp8Gemm>(s.lt);
    }
    p.gemms.push_back(g);
    p.lt_gemms.push_back(std::move(lt));
  }
  // A cuBLAS step's epilogue kernel takes the parameters the step passes, not a list of its own.
  std::vector<bool> epilogue(plan.kernels.size(), false);
  for (const auto& s : plan.steps)
    if (s.kind == codegen::PlanStep::Kind::cublas_gemm && s.gemm.epilogue >= 0)
      epilogue.at(static_cast<size_t>(s.gemm.epilogue)) = true;
  QJIT_CU(cuModuleLoadData(&p.module, cubin.data()));
  try {
    size_t workspace = plan.workspace_fixed;
    for (size_t ki = 0; ki < plan.kernels.size(); ++ki) {
      const auto& kd = plan.kernels[ki];
      LoadedKernel k;
      k.def = kd;
      const CUresult r = driver().cuModuleGetFunction(&k.function, p.module, kd.symbol.c_str());
      if (r != CUDA_SUCCESS) throw Error("driver", "kernel '" + kd.symbol + "' not found in the module: " + describe(r));
      if (!epilogue[ki]) check_params_against_cubin(kd, k.function, p.args, op);
      if (kd.params.size() + kd.tensor_maps.size() > kMaxParams || kd.tensor_maps.size() > codegen::KernelDef::kMaxTensorMaps)
        throw Error("codegen", kd.symbol + ": more parameters or tensor maps than a launch passes");
      for (const auto& prm : kd.params)
        k.params.push_back({prm.kind, prm.kind == codegen::KernelParam::Kind::arg ? position(prm.arg) : -1, prm.offset});
      for (const auto& m : kd.tensor_maps)
        k.maps.push_back({m, m.in_workspace ? -1 : position(m.source), m.rows_arg.empty() ? -1 : position(m.rows_arg)});
      resolve_for_device(k);
      const auto& g = k.def.geometry;
      workspace += g.workspace_per_block * (size_t{g.grid[0]} * g.grid[1] * g.grid[2]);
      p.kernels.push_back(std::move(k));
    }
    if (workspace > 0) p.workspaces = std::make_shared<Workspaces>(workspace);
    // Init kernels: once per load, finished before any call can use what they fill.
    for (const auto& k : p.kernels) {
      if (k.def.role != codegen::KernelDef::Role::init) continue;
      const auto& g = k.def.geometry;
      QJIT_CU(cuLaunchKernel(k.function, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2],
                             g.dynamic_smem, nullptr, nullptr, nullptr));
      QJIT_CU(cuStreamSynchronize(nullptr));
    }
  } catch (...) {
    driver().cuModuleUnload(p.module);
    throw;
  }
  return p;
}

PlanGuard::~PlanGuard() { driver().cuModuleUnload(p.module); }

namespace {

void check_one(const codegen::PointerArg& w, const ArgPack& a, int i) {
  const auto addr = static_cast<uintptr_t>(a.values[i].ptr);
  if (!addr && !w.optional) throw Error("argument", std::string(a.op) + ": " + w.name + " is null");
  if (addr % static_cast<uintptr_t>(w.align))
    throw Error("argument", std::string(a.op) + ": " + w.name + " = " + std::to_string(addr) + " is not aligned to " +
                                std::to_string(w.align) + " bytes (the kernel's vector access)");
}

// The pack holds one value of the right kind per argument of the op.
void check_pack(const std::vector<codegen::ArgDef>& args, const ArgPack& a) {
  if (static_cast<size_t>(a.count) != args.size())
    throw Error("argument", std::string(a.op) + ": " + std::to_string(a.count) + " arguments packed, the op takes " +
                                std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); ++i)
    if (((a.int_mask >> i) & 1) != (args[i].kind == codegen::ArgDef::Kind::int32))
      throw Error("argument", std::string(a.op) + ": argument " + args[i].name + " packed as " +
                                  ((a.int_mask >> i) & 1 ? "an int" : "a pointer"));
}

}  // namespace

void check_pointers(const LoadedPlan& p, const ArgPack& a) {
  check_pack(p.args, a);
  for (const auto& c : p.checks) check_one(c.want, a, c.arg);
}

void check_pointers(const std::vector<codegen::ArgDef>& args, const codegen::Plan& plan, const ArgPack& a) {
  check_pack(args, a);
  for (const auto& c : plan.pointers) check_one(c, a, arg_position(args, c.name, a.op));
}

namespace {

// A tensor map over the tensor the call passes, or over the call's
// workspace (a host-side encoding, no device work; codegen::TensorMap says
// what each field means).
CUresult encode_tensor_map(const ResolvedMap& rm, const ArgPack& a, CUdeviceptr workspace, CUtensorMap* map) {
  const codegen::TensorMap& t = rm.map;
  using Element = codegen::TensorMap::Element;
  if (t.rank < 2 || t.rank > 3) return CUDA_ERROR_INVALID_VALUE;
  if (t.in_workspace && !workspace) return CUDA_ERROR_INVALID_VALUE;
  const CUdeviceptr base = t.in_workspace ? workspace + t.workspace_offset : a.values[rm.source].ptr;
  const int element_bytes = t.element == Element::u32 ? 4 : t.element == Element::u8 ? 1 : 2;
  cuuint64_t dims[3], pitches[2];
  cuuint32_t box[3], strides[3] = {1, 1, 1};
  for (int d = 0; d < t.rank; ++d) dims[d] = static_cast<cuuint64_t>(t.dims[d]), box[d] = t.box[d];
  for (int d = 0; d + 1 < t.rank; ++d) pitches[d] = static_cast<cuuint64_t>(t.pitches[d]);
  if (rm.rows >= 0) {
    const int rows = a.values[rm.rows].i32;
    if (rows <= 0) return CUDA_ERROR_INVALID_VALUE;
    dims[t.rank - 1] = static_cast<cuuint64_t>(rows);
    pitches[t.rank - 2] = static_cast<cuuint64_t>(t.dims[0]) * element_bytes;
  }
  const CUtensorMapDataType type = t.element == Element::u32    ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                                   : t.element == Element::u8   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : t.element == Element::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return driver().cuTensorMapEncodeTiled(map, type, static_cast<cuuint32_t>(t.rank), reinterpret_cast<void*>(base),
                                         dims, pitches, box, strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         t.swizzle_128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace

CUresult launch_function(CUfunction function, const codegen::LaunchGeometry& g, bool programmatic, void** params,
                         CUstream stream) {
  if (!programmatic)
    return driver().cuLaunchKernel(function, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2],
                                   g.dynamic_smem, stream, params, nullptr);
  CUlaunchAttribute pdl{};
  pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  pdl.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = g.grid[0], cfg.gridDimY = g.grid[1], cfg.gridDimZ = g.grid[2];
  cfg.blockDimX = g.block[0], cfg.blockDimY = g.block[1], cfg.blockDimZ = g.block[2];
  cfg.sharedMemBytes = g.dynamic_smem;
  cfg.hStream = stream;
  cfg.attrs = &pdl;
  cfg.numAttrs = 1;
  return driver().cuLaunchKernelEx(&cfg, function, params, nullptr);
}

namespace {

CUresult launch_with(const LoadedKernel& k, const codegen::LaunchGeometry& g, void** params, CUstream stream) {
  return launch_function(k.function, g, k.programmatic, params, stream);
}

CUresult workspace_of(const LoadedPlan& p, CUstream stream, CUdeviceptr* out) {
  *out = 0;
  return p.workspaces ? p.workspaces->get(stream, out) : CUDA_SUCCESS;
}

// A cuBLAS GEMM step (codegen::CublasGemm says what each field means).
// Arguments resolved at load (ResolvedGemm); the handle run_steps found.
CUresult run_gemm(const LoadedPlan& p, size_t step, const ArgPack& a, const Cublas& blas, cublasHandle_t handle,
                  CUstream stream) {
  const codegen::CublasGemm& d = p.steps[step].gemm;
  const ResolvedGemm& at = p.gemms[step];
  CUdeviceptr workspace = 0;
  CUresult r = workspace_of(p, stream, &workspace);
  if (r != CUDA_SUCCESS) return r;
  const auto pointer = [&](int i) { return i < 0 ? CUdeviceptr{0} : a.values[i].ptr; };
  const CUdeviceptr x = pointer(at.x), y = pointer(at.y), residual = pointer(at.residual);
  const CUdeviceptr w = at.w < 0 ? workspace + d.w_offset : pointer(at.w);
  const int rows = at.rows < 0 ? static_cast<int>(d.fixed_rows) : a.values[at.rows].i32;
  const int n = static_cast<int>(d.n), kk = static_cast<int>(d.k);
  const cudaDataType type = d.bf16 ? CUDA_R_16BF : CUDA_R_16F;
  constexpr size_t kBytes = 2;  // x, W and y: fp16 or bf16
  auto gemm = [&](CUdeviceptr xs, int m, float beta, CUdeviceptr c, cudaDataType ct) {
    return gemm_x_wt(blas, handle, m, n, kk, w, xs, type, beta, c, ct) == CUBLAS_STATUS_SUCCESS ? CUDA_SUCCESS
                                                                                                : CUDA_ERROR_UNKNOWN;
  };
  if (d.to_sums) return gemm(x, rows, 0.0f, workspace + d.sums_offset, CUDA_R_32F);
  if (d.epilogue < 0) {
    // Nothing but (perhaps) the residual follows: the GEMM adds it as β·y.
    if (at.residual < 0) return gemm(x, rows, 0.0f, y, type);
    if (residual != y) {
      r = driver().cuMemcpyDtoDAsync(y, residual, size_t(rows) * n * kBytes, stream);
      if (r != CUDA_SUCCESS) return r;
    }
    return gemm(x, rows, 1.0f, y, type);
  }
  const LoadedKernel& epilogue = p.kernels.at(static_cast<size_t>(d.epilogue));
  CUdeviceptr sums = workspace + d.sums_offset, bias = pointer(at.bias), res = residual, out = y;
  for (int m0 = 0; m0 < rows; m0 += static_cast<int>(d.slab_rows)) {
    int m = static_cast<int>(std::min<long long>(d.slab_rows, rows - m0)), first = m0;
    r = gemm(x + size_t(m0) * kk * kBytes, m, 0.0f, sums, CUDA_R_32F);
    if (r != CUDA_SUCCESS) return r;
    void* eargs[] = {&sums, &bias, &res, &out, &m, &first};
    codegen::LaunchGeometry g = epilogue.def.geometry;
    g.grid[0] = static_cast<unsigned>((int64_t{m} * n + g.block[0] - 1) / g.block[0]);
    r = launch_with(epilogue, g, eargs, stream);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// A cuBLASLt FP8 step: its state kept in the loaded plan (LtFp8Gemm), the
// call's pointers and rows.
CUresult run_lt_gemm(const LoadedPlan& p, size_t step, const ArgPack& a, const CublasLt& lt, cublasLtHandle_t handle,
                     CUstream stream) {
  const ResolvedGemm& at = p.gemms[step];
  CUdeviceptr workspace = 0, scratch = 0;
  if (const CUresult r = workspace_of(p, stream, &workspace); r != CUDA_SUCCESS) return r;
  if (const CUresult r = cublaslt_workspace(stream, &scratch); r != CUDA_SUCCESS) return r;
  const CUdeviceptr bias = at.bias < 0 ? CUdeviceptr{0} : a.values[at.bias].ptr;
  return p.lt_gemms[step]->run(lt, handle, a.values[at.rows].i32, workspace, scratch, a.values[at.w].ptr, bias,
                               a.values[at.y].ptr, stream);
}

}  // namespace

CUresult launch_kernel(const LoadedPlan& p, int kernel, const ArgPack& a, CUstream stream, int iteration) {
  const LoadedKernel& k = p.kernels[static_cast<size_t>(kernel)];
  void* params[kMaxParams];
  CUdeviceptr workspace = 0, offsets[kMaxParams];
  CUtensorMap maps[codegen::KernelDef::kMaxTensorMaps];
  size_t i = 0;
  for (const auto& prm : k.params) {
    if (prm.kind == codegen::KernelParam::Kind::iteration) {
      params[i] = &iteration;
    } else if (prm.kind == codegen::KernelParam::Kind::arg) {
      // Both members of the union start at its address: an int parameter
      // reads i32, a pointer ptr.
      params[i] = const_cast<ArgPack::Value*>(&a.values[prm.arg]);
    } else {
      if (!workspace) {
        const CUresult r = workspace_of(p, stream, &workspace);
        if (r != CUDA_SUCCESS) return r;
      }
      offsets[i] = workspace ? workspace + prm.offset : 0;
      params[i] = &offsets[i];
    }
    ++i;
  }
  for (size_t m = 0; m < k.maps.size(); ++m) {
    if (k.maps[m].map.in_workspace && !workspace) {
      const CUresult r = workspace_of(p, stream, &workspace);
      if (r != CUDA_SUCCESS) return r;
    }
    const CUresult r = encode_tensor_map(k.maps[m], a, workspace, &maps[m]);
    if (r != CUDA_SUCCESS) return r;
    params[i++] = &maps[m];
  }
  return launch_with(k, k.def.geometry, params, stream);
}

CUresult run_steps(const LoadedPlan& p, const ArgPack& a, CUstream stream) {
  // The libraries looked up once per call, before anything is launched.
  const Cublas* blas = p.needs_cublas ? try_cublas(nullptr) : nullptr;
  const cublasHandle_t handle = blas ? cublas_handle(stream, nullptr) : nullptr;
  if (p.needs_cublas && !handle) return CUDA_ERROR_NOT_SUPPORTED;  // nothing launched
  const CublasLt* lt = p.needs_cublaslt ? try_cublaslt(nullptr) : nullptr;
  const cublasLtHandle_t lt_handle = lt ? cublaslt_handle(nullptr) : nullptr;
  if (p.needs_cublaslt && !lt_handle) return CUDA_ERROR_NOT_SUPPORTED;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const auto& s = p.steps[i];
    CUresult r = CUDA_SUCCESS;
    if (s.kind == codegen::PlanStep::Kind::kernel) {
      for (int64_t it = 0; it < s.repeat && r == CUDA_SUCCESS; ++it)
        r = launch_kernel(p, s.kernel, a, stream, static_cast<int>(it));
    } else if (s.kind == codegen::PlanStep::Kind::cublaslt_fp8_gemm) {
      r = run_lt_gemm(p, i, a, *lt, lt_handle, stream);
    } else {
      r = run_gemm(p, i, a, *blas, handle, stream);
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

std::string plan_unavailable(const LoadedPlan& p, CUstream stream) {
  std::string why = p.needs_cublas ? cublas_unavailable(stream) : "";
  if (why.empty() && p.needs_cublaslt) why = cublaslt_unavailable();
  return why;
}

std::string cublas_unavailable(CUstream stream) {
  std::string why;
  return try_cublas(&why) && cublas_handle(stream, &why) ? "" : why;
}

namespace {
thread_local int preloading = 0;  // qjit::Preload objects alive on this thread
}  // namespace

void begin_preload() { ++preloading; }
void end_preload() {
  if (preloading > 0) --preloading;
}

void run_checked(RunPlan run, const LoadedPlan& p, const ArgPack& a, CUstream stream) {
  check_pointers(p, a);
  if (preloading) {
    // What a first launch would allocate: the stream's workspace, its cuBLAS handle, cuBLASLt's scratch.
    CUdeviceptr workspace = 0, scratch = 0;
    if (const CUresult r = workspace_of(p, stream, &workspace); r != CUDA_SUCCESS)
      throw Error("driver", p.op + ": allocating the workspace failed: " + describe(r));
    if (p.needs_cublas || p.needs_cublaslt)
      if (const std::string why = plan_unavailable(p, stream); !why.empty())
        throw Error("cublas", p.op + " kernel " + p.key.substr(0, 12) + " multiplies with cuBLAS: " + why);
    if (p.needs_cublaslt)
      if (const CUresult r = cublaslt_workspace(stream, &scratch); r != CUDA_SUCCESS)
        throw Error("driver", p.op + ": allocating cuBLASLt's workspace failed: " + describe(r));
    return;
  }
  const CUresult r = run(p, a, stream);
  if (r == CUDA_ERROR_NOT_SUPPORTED)
    if (const std::string why = plan_unavailable(p, stream); !why.empty())
      throw Error("cublas", p.op + " kernel " + p.key.substr(0, 12) + " multiplies with cuBLAS: " + why);
  if (r != CUDA_SUCCESS) throw Error("driver", p.op + " launch failed: " + describe(r));
}

}  // namespace qjit::runtime
