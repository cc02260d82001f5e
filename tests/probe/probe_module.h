// What the qjit probes share: compiling a kernel source for this GPU with
// NVRTC and loading it, and loading a wq_gemm config built with marks of a
// probe's own (a #define the template reads) together with the __device__
// array they write.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/workload.h"

namespace qjit::probe {

struct Module {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
};

// `src` compiled for this GPU (sm_90a where it needs it) and loaded.
inline Module load_source(const codegen::GeneratedSource& src) {
  const auto r = codegen::compile(src, runtime::current_device().arch);
  if (!r.ok) throw Error("nvrtc", src.file_name + " failed to compile:\n" + r.log);
  Module m;
  QJIT_CU(cuModuleLoadData(&m.module, r.cubin.data()));
  QJIT_CU(cuModuleGetFunction(&m.function, m.module, src.kernel_name.c_str()));
  return m;
}

// A probe's own kernel `kernel` from `text`.
inline Module load_source(const std::string& file, const std::string& kernel, const std::string& text) {
  codegen::GeneratedSource src;
  src.file_name = file;
  src.kernel_name = kernel;
  src.text = text;
  return load_source(src);
}

// QJIT_PROBE_DEFINES=A,B in the environment: the names a marked kernel is
// also compiled with (what-if builds of a template under study, timed beside
// the real one; no such #ifdef is in the templates as committed). "" if unset.
inline std::string probe_defines() {
  const char* env = std::getenv("QJIT_PROBE_DEFINES");
  return env ? env : "";
}

// QJIT_PROBE_REPEAT=N in the environment: launch the marked kernel N times
// on the same inputs and read the marks of the last (default 1). From the
// second launch on, the kernel's code and its inputs are in L2, so the
// difference from a single launch is what a cold start costs.
inline int probe_repeat() {
  const char* env = std::getenv("QJIT_PROBE_REPEAT");
  const int n = env ? std::atoi(env) : 1;
  if (n < 1 || n > 100) throw Error("argument", "QJIT_PROBE_REPEAT must be 1 to 100, got '" + std::string(env) + "'");
  return n;
}

// A wq_gemm config compiled with `#define <define> 1` (and each name of
// probe_defines()) first, loaded as the runtime loads cached kernels (its
// geometry resolved for this GPU, PDL), and the __device__ array `marks` its
// marks go to.
struct MarkedKernel {
  runtime::LoadedPlan plan;
  CUdeviceptr marks = 0;
  size_t marks_bytes = 0;
};

inline MarkedKernel load_marked_wq_gemm(const codegen::OpSpec& spec, const nlohmann::json& config,
                                        const std::string& define, const std::string& marks) {
  const auto& op = codegen::find_op("wq_gemm");
  op.validate_config(spec, config);
  auto src = codegen::generate_source(spec, config);
  src.text = "#define " + define + " 1\n" + src.text;
  const std::string extra = probe_defines();
  for (size_t at = 0; at < extra.size();) {
    const size_t comma = std::min(extra.find(',', at), extra.size());
    if (comma > at) src.text = "#define " + extra.substr(at, comma - at) + " 1\n" + src.text;
    at = comma + 1;
  }
  const auto r = codegen::compile(src, runtime::current_device().arch);
  if (!r.ok) throw Error("nvrtc", src.file_name + " failed to compile:\n" + r.log);
  MarkedKernel k;
  k.plan = runtime::load_plan("wq_gemm", op.plan(spec, config), r.cubin);
  QJIT_CU(cuModuleGetGlobal(&k.marks, &k.marks_bytes, k.plan.module, marks.c_str()));
  return k;
}

// Back-to-back launches of `kernel` as the benchmark runs them (PDL between
// them, the workload's copies rotated): the mean of 30 between two events,
// three times; the median of the three, in µs. What compares a what-if build
// (probe_defines()) with the kernel as built.
// One call of a wq_gemm plan, thrown on failure.
inline void run_wq_gemm(const runtime::LoadedPlan& plan, const ArgPack& args, CUstream stream) {
  const CUresult r = runtime::run_steps(plan, args, stream);
  if (r != CUDA_SUCCESS) throw Error("driver", "probe launch failed: " + runtime::describe(r));
}

inline double back_to_back_us(const runtime::LoadedPlan& plan, tuner::Workload& work, CUstream stream) {
  CUevent begin = nullptr, end = nullptr;
  QJIT_CU(cuEventCreate(&begin, CU_EVENT_DEFAULT));
  QJIT_CU(cuEventCreate(&end, CU_EVENT_DEFAULT));
  std::vector<double> means;
  for (int round = 0; round < 3; ++round) {
    QJIT_CU(cuEventRecord(begin, stream));
    for (int i = 0; i < 30; ++i) run_wq_gemm(plan, work.args(i % work.copies()), stream);
    QJIT_CU(cuEventRecord(end, stream));
    QJIT_CU(cuEventSynchronize(end));
    float ms = 0;
    QJIT_CU(cuEventElapsedTime(&ms, begin, end));
    means.push_back(1e3 * ms / 30);
  }
  runtime::driver().cuEventDestroy(begin);
  runtime::driver().cuEventDestroy(end);
  std::sort(means.begin(), means.end());
  return means[1];
}

}  // namespace qjit::probe
