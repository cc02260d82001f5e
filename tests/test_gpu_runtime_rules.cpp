// The runtime's context rules on the GPU (DESIGN.md "Runtime rules"): a call
// with no context current runs on the default device and leaves none
// current; QJIT_REQUIRE_TUNED=1 refuses an untuned shape before compiling or
// storing anything (C API: QJIT_ERROR_NOT_TUNED); QJIT_LOG=1 reports a miss
// and an untuned load; under qjit::Preload a call launches nothing, and a
// CUDA graph captured afterwards runs the op without compiling or allocating.
// Contexts are told apart by the driver's id, not the handle: two contexts of
// one device, interleaved on the legacy default stream, each use their own
// modules, workspaces and cuBLAS handles; a context created after another was
// destroyed (often at the same address) loads its own modules again.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "cache/store.h"
#include "codegen/spec.h"
#include "qjit/qjit.h"
#include "qjit/qjit_c.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/plan.h"
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"
#include "tuner/workload.h"

using namespace qjit;

namespace {

// The driver's own entries for making and ending contexts (the runtime
// never makes one, so its table lacks them); libcuda is loaded already.
template <typename Fn>
Fn driver_entry(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib != nullptr);
  const auto fn = reinterpret_cast<Fn>(dlsym(lib, name));
  dlclose(lib);
  REQUIRE(fn != nullptr);
  return fn;
}
CUcontext create_context() {
  using Create = CUresult (*)(CUcontext*, unsigned, CUdevice);
  CUdevice device = 0;
  QJIT_CU(cuCtxGetDevice(&device));
  CUcontext c = nullptr;
  REQUIRE(driver_entry<Create>("cuCtxCreate_v2")(&c, 0, device) == CUDA_SUCCESS);  // and makes it current
  return c;
}
void destroy_context(CUcontext c) {
  using Destroy = CUresult (*)(CUcontext);
  REQUIRE(driver_entry<Destroy>("cuCtxDestroy_v2")(c) == CUDA_SUCCESS);
}


// wq_gemm through dequantisation and cuBLAS (its plan takes a cuBLAS handle
// per stream), with its inputs allocated in the current context.
struct CublasCase {
  codegen::OpSpec spec;
  std::unique_ptr<tuner::Workload> work;
  static constexpr int kRows = 100;
  static nlohmann::json config() { return {{"family", "cublas"}, {"warps", 4}, {"tiles", 1}}; }
  static codegen::OpSpec make_spec() { return codegen::parse_spec("wq_gemm", "k=512,n=96,m=128"); }
  // Tunes the cuBLAS config into cache file `db` and makes it the runtime's;
  // false (with a warning) when cuBLAS is missing.
  static bool tune_into(const std::string& db) {
    if (const std::string why = runtime::cublas_unavailable(nullptr); !why.empty()) {
      WARN("not run: " << why);
      return false;
    }
    test::tune_one_config(db, make_spec(), config());
    return true;
  }
  CublasCase() : spec(make_spec()), work(tuner::make_wq_gemm_workload(spec, test::fresh_seed(), 0, kRows)) {}
  // On the caller's legacy default stream.
  void run() const {
    const ArgPack& a = work->args(0);
    auto p = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
    WqGemmShape s;
    s.k = 512, s.n = 96;
    wq_gemm(s, kRows, p(0), p(1), p(2), p(3), nullptr, nullptr, p(6), nullptr);
  }
};

// Both cases of one context.
struct InContext {
  CUcontext context = nullptr;
  test::W8a8Case w8a8;
  std::unique_ptr<CublasCase> blas;
  // Runs both ops in `context` on its legacy default stream and checks them; returns stderr.
  std::string run_and_check() {
    QJIT_CU(cuCtxSetCurrent(context));
    w8a8.work->poison_output(nullptr);
    blas->work->poison_output(nullptr);
    const std::string err = test::stderr_of([&] {
      w8a8_gemm(w8a8.shape, w8a8.args);
      blas->run();
    });
    CHECK(test::current_context() == context);
    QJIT_CU(cuCtxSynchronize());
    auto v = w8a8.work->verify(1.0);
    INFO("w8a8_gemm: " << v.message);
    CHECK(v.ok);
    v = blas->work->verify(1.0);
    INFO("wq_gemm (cuBLAS): " << v.message);
    CHECK(v.ok);
    return err;
  }
};

InContext allocate_in(CUcontext context) {
  QJIT_CU(cuCtxSetCurrent(context));
  InContext c;
  c.context = context;
  c.w8a8 = test::w8a8_case(64);
  c.blas = std::make_unique<CublasCase>();
  return c;
}

}  // namespace

TEST_CASE("runtime rules: no context current → the default device for the call, none current after", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("ctx.db"));
  test::W8a8Case c = test::w8a8_case(64);
  const CUcontext primary = test::current_context();
  REQUIRE(primary != nullptr);
  c.work->poison_output(nullptr);
  QJIT_CU(cuCtxSynchronize());
  QJIT_CU(cuCtxSetCurrent(nullptr));
  w8a8_gemm(c.shape, c.args);
  CHECK(test::current_context() == nullptr);  // as the caller left it
  QJIT_CU(cuCtxSetCurrent(primary));
  const auto v = c.work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
  // With a context current, it stays current and is the one used.
  c.work->poison_output(nullptr);
  w8a8_gemm(c.shape, c.args);
  CHECK(test::current_context() == primary);
  CHECK(c.work->verify(1.0).ok);
}

TEST_CASE("runtime rules: QJIT_REQUIRE_TUNED refuses an untuned shape; QJIT_LOG reports loads", "[gpu]") {
  test::TempDir dir;
  const std::string db = dir.file("rules.db");
  set_cache_path(db);
  test::W8a8Case c = test::w8a8_case(96);
  {
    test::EnvVar require("QJIT_REQUIRE_TUNED", "1");
    try {
      w8a8_gemm(c.shape, c.args);
      FAIL("an untuned shape ran under QJIT_REQUIRE_TUNED=1");
    } catch (const Error& e) {
      CHECK(e.stage() == "untuned");
      CHECK_THAT(e.what(), Catch::Contains("QJIT_REQUIRE_TUNED") && Catch::Contains("qjit tune --op w8a8_gemm"));
    }
    REQUIRE(qjit_set_cache_path(db.c_str()) == QJIT_OK);
    const qjit_w8a8_gemm_args a = test::c_args(c);
    CHECK(qjit_w8a8_gemm(&a, nullptr) == QJIT_ERROR_NOT_TUNED);
    CHECK_THAT(qjit_last_error(), Catch::Contains("no kernel"));
  }
  CHECK(cache::Store(db).list().empty());  // nothing compiled or stored
  test::EnvVar log("QJIT_LOG", "1");
  std::string err = test::stderr_of([&] { w8a8_gemm(c.shape, c.args); });
  CHECK_THAT(err, Catch::Contains("not in") && Catch::Contains("compiling the default config, untuned"));
  set_cache_path(db);  // a fresh process's view: the stored untuned row is loaded
  err = test::stderr_of([&] { w8a8_gemm(c.shape, c.args); });
  CHECK_THAT(err, Catch::Contains("loaded the untuned (default config) kernel") && Catch::Contains("tune it"));
  err = test::stderr_of([&] { w8a8_gemm(c.shape, c.args); });
  CHECK(err.empty());  // a hit in memory says nothing
}

TEST_CASE("runtime rules: Preload launches nothing; a graph captured after it runs the op", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("preload.db"));
  test::W8a8Case c = test::w8a8_case(128);
  CUstream stream = nullptr;
  QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  c.work->poison_output(stream);
  {
    Preload ready;
    w8a8_gemm(c.shape, c.args, reinterpret_cast<CUstream_st*>(stream));
  }
  QJIT_CU(cuStreamSynchronize(stream));
  CHECK_FALSE(c.work->verify(1.0).ok);  // still poisoned: nothing ran
  // The C API's scope, nested, the same way.
  qjit_preload_begin();
  qjit_preload_begin();
  w8a8_gemm(c.shape, c.args, reinterpret_cast<CUstream_st*>(stream));
  qjit_preload_end();
  qjit_preload_end();
  QJIT_CU(cuStreamSynchronize(stream));
  CHECK_FALSE(c.work->verify(1.0).ok);

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  QJIT_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  w8a8_gemm(c.shape, c.args, reinterpret_cast<CUstream_st*>(stream));
  QJIT_CU(cuStreamEndCapture(stream, &graph));
  QJIT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  QJIT_CU(cuGraphLaunch(exec, stream));
  QJIT_CU(cuStreamSynchronize(stream));
  const auto v = c.work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
  QJIT_CU(cuGraphExecDestroy(exec));
  QJIT_CU(cuGraphDestroy(graph));
  QJIT_CU(cuStreamDestroy(stream));
}

TEST_CASE("runtime rules: two contexts of one device, interleaved; a context made after one is destroyed", "[gpu]") {
  test::TempDir dir;
  if (!CublasCase::tune_into(dir.file("contexts.db"))) return;
  const CUcontext primary = test::current_context();
  REQUIRE(primary != nullptr);
  const CUcontext made = create_context();
  {
    InContext a = allocate_in(primary), b = allocate_in(made);
    test::EnvVar log("QJIT_LOG", "1");
    // Each context's first calls load their own modules (the rows are shared).
    CHECK(test::count_of(a.run_and_check(), "qjit: ") == 2);
    CHECK(test::count_of(b.run_and_check(), "loaded the") == 2);
    // Interleaved on the legacy default stream, which is each context's own:
    // a cuBLAS handle (and a workspace) of the other context would fault or
    // write the other context's memory.
    for (int i = 0; i < 3; ++i) {
      CHECK(b.run_and_check().empty());
      CHECK(a.run_and_check().empty());
    }
    QJIT_CU(cuCtxSetCurrent(made));
  }
  destroy_context(made);  // its allocations with it
  QJIT_CU(cuCtxSetCurrent(primary));
  // A new context, often at the destroyed one's address: its own modules again, not the dead ones.
  const CUcontext again = create_context();
  WARN("the new context " << (again == made ? "reuses" : "does not reuse") << " the destroyed one's address");
  {
    InContext c = allocate_in(again);
    test::EnvVar log("QJIT_LOG", "1");
    CHECK(test::count_of(c.run_and_check(), "loaded the") == 2);
    CHECK(c.run_and_check().empty());
    QJIT_CU(cuCtxSetCurrent(again));
  }
  destroy_context(again);
  QJIT_CU(cuCtxSetCurrent(primary));
}

// Run alone (`qjit_tests "[gpu_reset]"`, tests/gpu_session.sh): a reset ends
// every allocation and module of the process in the primary context.
TEST_CASE("runtime rules: after the primary context is reset, calls load their modules again", "[.][gpu_reset]") {
  test::TempDir dir;
  if (!CublasCase::tune_into(dir.file("reset.db"))) return;
  CUdevice device = 0;
  QJIT_CU(cuCtxGetDevice(&device));
  CUcontext primary = test::current_context();
  {
    InContext a = allocate_in(primary);
    a.run_and_check();
    QJIT_CU(cuCtxSynchronize());
  }
  using Reset = CUresult (*)(CUdevice);
  REQUIRE(driver_entry<Reset>("cuDevicePrimaryCtxReset_v2")(device) == CUDA_SUCCESS);  // cudaDeviceReset's effect
  QJIT_CU(cuDevicePrimaryCtxRetain(&primary, device));
  QJIT_CU(cuCtxSetCurrent(primary));
  InContext b = allocate_in(primary);
  test::EnvVar log("QJIT_LOG", "1");
  CHECK(test::count_of(b.run_and_check(), "loaded the") == 2);
  CHECK(b.run_and_check().empty());
}
