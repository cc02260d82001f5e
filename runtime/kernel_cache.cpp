#include "runtime/kernel_cache.h"
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include "cache/sha256.h"
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/templates.h"
#include "runtime/cublas.h"
#include "runtime/device.h"
#include "runtime/driver.h"

namespace qjit::runtime {

std::string templates_hash() {
  static const std::string hash = [] {
    std::string all;
    for (const auto& f : codegen::embedded_templates()) all += f.path + '\0' + f.text + '\0';
    return cache::sha256_hex(all);
  }();
  return hash;
}

cache::Fingerprint fingerprint(const codegen::OpSpec& spec) {
  cache::Fingerprint fp;
  fp.op = spec.op;
  fp.spec_json = spec.canonical_json();
  fp.device = current_device().identity;
  fp.nvrtc_version = codegen::nvrtc_version();
  fp.templates_hash = templates_hash();
  fp.qjit_version = QJIT_VERSION;
  fp.codegen_version = codegen::kCodegenVersion;
  return fp;
}

void dump_if_requested(const cache::KernelRecord& rec) {
  const char* dir = std::getenv("QJIT_DUMP_DIR");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string base = std::string(dir) + "/" + rec.fp.op + "_" + rec.key().substr(0, 12);
  std::ofstream(base + ".cu") << rec.source;
  std::ofstream(base + ".ptx") << rec.ptx;
  std::ofstream(base + ".log") << rec.compile_log;
}

cache::KernelRecord build_record(const codegen::OpSpec& spec, const nlohmann::json& config, bool tuned) {
  auto src = codegen::generate_source(spec, config);
  auto res = codegen::compile(src, current_device().arch);
  if (!res.ok) throw Error("nvrtc", "compiling " + spec.label() + " config " + config.dump() + " failed", res.log);
  return make_record(spec, config, std::move(src), std::move(res), tuned);
}

cache::KernelRecord make_record(const codegen::OpSpec& spec, const nlohmann::json& config,
                                codegen::GeneratedSource src, codegen::CompileResult res, bool tuned) {
  cache::KernelRecord rec;
  rec.fp = fingerprint(spec);
  rec.config = config;
  rec.tuned = tuned;
  rec.kernel_name = src.kernel_name;
  rec.cubin = std::move(res.cubin);
  rec.ptx = std::move(res.ptx);
  rec.source = std::move(src.text);
  rec.compile_log = std::move(res.log);
  rec.registers = res.registers;
  rec.spill_bytes = res.spill_bytes;
  rec.shared_bytes = res.shared_bytes;
  return rec;
}

// QJIT_PDL=0 turns programmatic dependent launch off (every launch then
// waits for the previous kernel of the stream to finish, as plain launches do).
static bool programmatic_launch_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("QJIT_PDL");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

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
  auto& g = k.geometry;
  const Device& dev = current_device();
  int static_smem = 0;
  QJIT_CU(cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k.function));
  const SmemBudget budget{dev.smem_per_sm, dev.smem_per_block_optin, dev.smem_reserved_per_block, static_smem};
  if (g.grid_per_sm > 0) {
    g.grid[0] = g.grid_per_sm * static_cast<unsigned>(dev.identity.sm_count);
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
  const size_t blocks = size_t{g.grid[0]} * g.grid[1] * g.grid[2];
  const size_t bytes = g.workspace_fixed + g.workspace_per_block * blocks;
  if (g.workspace_param >= 0 && bytes > 0) k.workspaces = std::make_shared<Workspaces>(bytes);
}

LoadedKernel load_record(const cache::KernelRecord& rec, const codegen::OpSpec& spec) {
  current_device();
  LoadedKernel k;
  k.key = rec.key();
  k.config = rec.config;
  k.tuned = rec.tuned;
  const auto& op = codegen::find_op(spec.op);
  k.geometry = op.launch_geometry(spec, rec.config);
  k.pointers = op.pointer_args(spec, rec.config);
  k.programmatic = k.geometry.programmatic && programmatic_launch_enabled() &&
                   std::stoi(current_device().identity.compute_capability) >= 9;
  QJIT_CU(cuModuleLoadData(&k.module, rec.cubin.data()));
  try {
    CUresult r = driver().cuModuleGetFunction(&k.function, k.module, rec.kernel_name.c_str());
    if (r != CUDA_SUCCESS)
      throw Error("driver", "kernel '" + rec.kernel_name + "' not found in cached module: " + describe(r));
    resolve_for_device(k);
    if (k.geometry.dense_gemm.on && k.geometry.dense_gemm.slab_rows > 0) {
      const std::string name = rec.kernel_name + "_epilogue";
      r = driver().cuModuleGetFunction(&k.epilogue, k.module, name.c_str());
      if (r != CUDA_SUCCESS) throw Error("driver", "kernel '" + name + "' not found in cached module: " + describe(r));
    }
    // A module may carry `<kernel>_init`: one-time precomputation into its
    // __device__ globals (e.g. fp_lut's table of every fp16 input), run here
    // once per load with 256 x 256 threads (it grid-strides) and synchronized.
    CUfunction init = nullptr;
    if (driver().cuModuleGetFunction(&init, k.module, (rec.kernel_name + "_init").c_str()) == CUDA_SUCCESS) {
      QJIT_CU(cuLaunchKernel(init, 256, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr));
      QJIT_CU(cuCtxSynchronize());
    }
  } catch (...) {
    driver().cuModuleUnload(k.module);
    throw;
  }
  return k;
}

namespace {

// Tensor map t over the tensor the caller passes (a host-side encoding, no
// device work; LaunchGeometry::TensorMap says what each field means).
CUresult encode_tensor_map(const codegen::LaunchGeometry::TensorMap& t, void** args, CUtensorMap* map) {
  using Element = codegen::LaunchGeometry::TensorMap::Element;
  if (t.rank < 2 || t.rank > 3) return CUDA_ERROR_INVALID_VALUE;
  const CUdeviceptr base = *static_cast<const CUdeviceptr*>(args[t.source]);
  const int element_bytes = t.element == Element::u32 ? 4 : t.element == Element::u8 ? 1 : 2;
  cuuint64_t dims[3], pitches[2];
  cuuint32_t box[3], strides[3] = {1, 1, 1};
  for (int d = 0; d < t.rank; ++d) dims[d] = static_cast<cuuint64_t>(t.dims[d]), box[d] = t.box[d];
  for (int d = 0; d + 1 < t.rank; ++d) pitches[d] = static_cast<cuuint64_t>(t.pitches[d]);
  if (t.rows_param >= 0) {
    const int rows = *static_cast<const int*>(args[t.rows_param]);
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

// The kernel alone; *workspace_out (if given) receives the stream's workspace.
CUresult launch_kernel(const LoadedKernel& k, void** args, CUstream stream, CUdeviceptr* workspace_out) {
  const auto& g = k.geometry;
  // The caller's parameters, then the stream's workspace, then the tensor maps.
  constexpr int kMaxParams = 16;
  void* with_workspace[kMaxParams];
  CUdeviceptr workspace = 0;
  if (g.workspace_param >= 0) {
    if (g.workspace_param >= kMaxParams) return CUDA_ERROR_INVALID_VALUE;
    if (k.workspaces) {
      const CUresult r = k.workspaces->get(stream, &workspace);
      if (r != CUDA_SUCCESS) return r;
    }
    for (int i = 0; i < g.workspace_param; ++i) with_workspace[i] = args[i];
    with_workspace[g.workspace_param] = &workspace;
    args = with_workspace;
  }
  if (workspace_out) *workspace_out = workspace;
  constexpr size_t kMaxMaps = codegen::LaunchGeometry::kMaxTensorMaps;
  CUtensorMap maps[kMaxMaps];
  if (!g.tensor_maps.empty()) {
    // args is with_workspace here: the maps follow the workspace.
    if (g.workspace_param < 0 || g.tensor_maps.size() > kMaxMaps ||
        g.tensor_map_param(g.tensor_maps.size() - 1) >= kMaxParams)
      return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < g.tensor_maps.size(); ++i) {
      const CUresult r = encode_tensor_map(g.tensor_maps[i], args, &maps[i]);
      if (r != CUDA_SUCCESS) return r;
      with_workspace[g.tensor_map_param(i)] = &maps[i];
    }
  }
  if (!k.programmatic)
    return driver().cuLaunchKernel(k.function, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2],
                                   g.dynamic_smem, stream, args, nullptr);
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
  return driver().cuLaunchKernelEx(&cfg, k.function, args, nullptr);
}

// A dense_gemm launch (codegen/op.h, LaunchGeometry::DenseGemm): the kernel
// writes W at the start of the workspace, then cuBLAS multiplies, and per
// slab the epilogue kernel stores y from the sums after W.
CUresult launch_dense_gemm(const LoadedKernel& k, void** args, CUstream stream) {
  const auto& d = k.geometry.dense_gemm;
  const Cublas* blas = try_cublas(nullptr);
  const cublasHandle_t handle = blas ? cublas_handle(stream, nullptr) : nullptr;
  if (!handle) return CUDA_ERROR_NOT_SUPPORTED;  // nothing launched
  CUdeviceptr w = 0;
  CUresult r = launch_kernel(k, args, stream, &w);
  if (r != CUDA_SUCCESS) return r;
  auto pointer = [&](int param) { return param < 0 ? CUdeviceptr{0} : *static_cast<const CUdeviceptr*>(args[param]); };
  const CUdeviceptr x = pointer(d.x_param), y = pointer(d.y_param), residual = pointer(d.residual_param);
  const int rows = *static_cast<const int*>(args[d.rows_param]);
  const int n = static_cast<int>(d.n), kk = static_cast<int>(d.k);
  const cudaDataType type = d.bf16 ? CUDA_R_16BF : CUDA_R_16F;
  constexpr size_t kBytes = 2;  // x, W and y: fp16 or bf16
  auto gemm = [&](CUdeviceptr xs, int m, float beta, CUdeviceptr c, cudaDataType ct) {
    return gemm_x_wt(*blas, handle, m, n, kk, w, xs, type, beta, c, ct) == CUBLAS_STATUS_SUCCESS ? CUDA_SUCCESS
                                                                                                 : CUDA_ERROR_UNKNOWN;
  };
  if (d.slab_rows == 0) {
    // Nothing but (perhaps) the residual follows: the GEMM adds it as β·y.
    if (d.residual_param < 0) return gemm(x, rows, 0.0f, y, type);
    if (residual != y) {
      r = driver().cuMemcpyDtoDAsync(y, residual, size_t(rows) * n * kBytes, stream);
      if (r != CUDA_SUCCESS) return r;
    }
    return gemm(x, rows, 1.0f, y, type);
  }
  CUdeviceptr sums = w + size_t(kk) * n * kBytes, bias = pointer(d.bias_param), res = residual, out = y;
  for (int m0 = 0; m0 < rows; m0 += static_cast<int>(d.slab_rows)) {
    int m = static_cast<int>(std::min<long long>(d.slab_rows, rows - m0)), first = m0;
    r = gemm(x + size_t(m0) * kk * kBytes, m, 0.0f, sums, CUDA_R_32F);
    if (r != CUDA_SUCCESS) return r;
    void* eargs[] = {&sums, &bias, &res, &out, &m, &first};
    const unsigned blocks = static_cast<unsigned>((int64_t{m} * n + 255) / 256);
    r = driver().cuLaunchKernel(k.epilogue, blocks, 1, 1, 256, 1, 1, 0, stream, eargs, nullptr);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace

std::string dense_gemm_unavailable(CUstream stream) {
  std::string why;
  return try_cublas(&why) && cublas_handle(stream, &why) ? "" : why;
}

CUresult try_launch(const LoadedKernel& k, void** args, CUstream stream) {
  return k.geometry.dense_gemm.on ? launch_dense_gemm(k, args, stream) : launch_kernel(k, args, stream, nullptr);
}

void launch(const LoadedKernel& k, void** args, CUstream stream) {
  const CUresult r = try_launch(k, args, stream);
  if (r == CUDA_ERROR_NOT_SUPPORTED && k.geometry.dense_gemm.on)
    throw Error("cublas",
                "kernel " + k.key.substr(0, 12) + " multiplies with cuBLAS: " + dense_gemm_unavailable(stream));
  if (r != CUDA_SUCCESS) throw Error("driver", "kernel launch failed: " + describe(r));
}

void check_pointers(const std::vector<codegen::PointerArg>& want, const LaunchPointers& p) {
  if (p.values.size() != want.size())
    throw Error("argument", std::string(p.op) + ": expected " + std::to_string(want.size()) + " pointers");
  size_t i = 0;
  for (const void* v : p.values) {
    const auto& w = want[i++];
    const auto addr = reinterpret_cast<uintptr_t>(v);
    if (!v && !w.optional) throw Error("argument", std::string(p.op) + ": " + w.name + " is null");
    if (addr % w.align)
      throw Error("argument", std::string(p.op) + ": " + w.name + " = " + std::to_string(addr) + " is not aligned to " +
                                  std::to_string(w.align) + " bytes (the kernel's vector access)");
  }
}

void launch_checked(const LoadedKernel& k, const LaunchPointers& p, CUstream stream, std::initializer_list<int> ints) {
  if (p.values.size() + ints.size() > 12)
    throw Error("argument", std::string(p.op) + ": " + std::to_string(p.values.size() + ints.size()) + " parameters");
  check_pointers(k.pointers, p);
  const void* values[12];
  int int_values[12];
  void* args[12];
  size_t i = 0;
  for (const void* v : p.values) {
    values[i] = v;
    args[i] = &values[i];
    ++i;
  }
  size_t j = 0;
  for (int v : ints) {
    int_values[j] = v;
    args[i++] = &int_values[j++];
  }
  launch(k, args, stream);
}

KernelCache& KernelCache::instance() {
  static KernelCache cache;
  return cache;
}

void KernelCache::set_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  path_ = path;
  store_.reset();
  loaded_.clear();  // modules stay loaded until exit; references handed out stay valid
}

std::string KernelCache::path() {
  std::lock_guard<std::mutex> lock(mu_);
  return path_.empty() ? cache::Store::default_path() : path_;
}

cache::Store& KernelCache::store() {
  if (!store_) store_ = std::make_unique<cache::Store>(path_.empty() ? cache::Store::default_path() : path_);
  return *store_;
}

const LoadedKernel& KernelCache::get_slow(const std::string& fast_key, const codegen::OpSpec& spec,
                                          const LaunchPointers* check) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = loaded_.find(fast_key); it != loaded_.end()) return *it->second;
  const auto& op = codegen::find_op(spec.op);
  const auto check_for = [&](const nlohmann::json& config) {
    if (check) check_pointers(op.pointer_args(spec, config), *check);
  };
  const std::string key = fingerprint(spec).key();
  std::optional<cache::KernelRecord> rec = store().lookup(key);
  std::unique_ptr<LoadedKernel> k;
  if (rec) {
    check_for(rec->config);
    try {
      k = std::make_unique<LoadedKernel>(load_record(*rec, spec));
    } catch (const Error& e) {
      // A row that passes its checksum but does not load is a miss: rebuild it.
      std::fprintf(stderr, "qjit: cached kernel %s does not load (%s); recompiling\n", key.substr(0, 12).c_str(),
                   e.what());
      store().remove(key);
      rec.reset();
    }
  }
  if (!rec) {
    const nlohmann::json config = op.default_config(spec);
    check_for(config);
    cache::KernelRecord fresh = build_record(spec, config, /*tuned=*/false);
    store().put(fresh);
    k = std::make_unique<LoadedKernel>(load_record(fresh, spec));
    rec = std::move(fresh);
  }
  dump_if_requested(*rec);
  return *(loaded_[fast_key] = std::move(k));
}

}  // namespace qjit::runtime
