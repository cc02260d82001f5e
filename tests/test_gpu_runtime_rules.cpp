// The runtime's context rules on the GPU (DESIGN.md "Runtime rules"): a call
// with no context current runs on the default device and leaves none
// current; QJIT_REQUIRE_TUNED=1 refuses an untuned shape before compiling or
// storing anything (C API: QJIT_ERROR_NOT_TUNED); QJIT_LOG=1 reports a miss
// and an untuned load; under qjit::Preload a call launches nothing, and a
// CUDA graph captured afterwards runs the op without compiling or allocating.
#include <catch2/catch.hpp>

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
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"
#include "tuner/workload.h"

using namespace qjit;

namespace {

// A small w8a8_gemm (two kernels and a workspace) with its workload's inputs.
struct Case {
  W8a8GemmShape shape;
  std::unique_ptr<tuner::Workload> work;
  W8a8GemmArgs args;
};

Case w8a8_case(int n) {
  Case c;
  c.shape.k = 256, c.shape.n = n, c.shape.block = 64;
  const auto spec = codegen::parse_spec("w8a8_gemm", "k=256,n=" + std::to_string(n) + ",m=16,block=64");
  c.work = tuner::make_workload(spec, test::fresh_seed(), 0);
  const ArgPack& a = c.work->args(0);
  auto p = [&](int i) { return reinterpret_cast<void*>(a.values[i].ptr); };
  c.args = {p(0), p(1), p(2), p(3), p(4), nullptr, p(6), 16};
  return c;
}

CUcontext current() {
  CUcontext c = nullptr;
  QJIT_CU(cuCtxGetCurrent(&c));
  return c;
}

// Everything written to stderr while f runs.
template <typename F>
std::string stderr_of(F&& f) {
  test::TempDir dir;
  const std::string path = dir.file("stderr.txt");
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* file = std::fopen(path.c_str(), "w");
  dup2(fileno(file), 2);
  try {
    f();
  } catch (...) {
    std::fflush(stderr), dup2(saved, 2), close(saved), std::fclose(file);
    throw;
  }
  std::fflush(stderr), dup2(saved, 2), close(saved), std::fclose(file);
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("runtime rules: no context current → the default device for the call, none current after", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("ctx.db"));
  Case c = w8a8_case(64);
  const CUcontext primary = current();
  REQUIRE(primary != nullptr);
  c.work->poison_output(nullptr);
  QJIT_CU(cuCtxSynchronize());
  QJIT_CU(cuCtxSetCurrent(nullptr));
  w8a8_gemm(c.shape, c.args);
  CHECK(current() == nullptr);  // as the caller left it
  QJIT_CU(cuCtxSetCurrent(primary));
  const auto v = c.work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
  // With a context current, it stays current and is the one used.
  c.work->poison_output(nullptr);
  w8a8_gemm(c.shape, c.args);
  CHECK(current() == primary);
  CHECK(c.work->verify(1.0).ok);
}

TEST_CASE("runtime rules: QJIT_REQUIRE_TUNED refuses an untuned shape; QJIT_LOG reports loads", "[gpu]") {
  test::TempDir dir;
  const std::string db = dir.file("rules.db");
  set_cache_path(db);
  Case c = w8a8_case(96);
  {
    EnvVar require("QJIT_REQUIRE_TUNED", "1");
    try {
      w8a8_gemm(c.shape, c.args);
      FAIL("an untuned shape ran under QJIT_REQUIRE_TUNED=1");
    } catch (const Error& e) {
      CHECK(e.stage() == "untuned");
      CHECK_THAT(e.what(), Catch::Contains("QJIT_REQUIRE_TUNED") && Catch::Contains("qjit tune --op w8a8_gemm"));
    }
    REQUIRE(qjit_set_cache_path(db.c_str()) == QJIT_OK);
    qjit_w8a8_gemm_args a{};
    a.k = 256, a.n = 96, a.block = 64, a.x = c.args.x, a.wq = c.args.wq, a.w_scale = c.args.w_scale;
    a.w_offset = c.args.w_offset, a.w_sum = c.args.w_sum, a.y = c.args.y, a.m = 16;
    CHECK(qjit_w8a8_gemm(&a, nullptr) == QJIT_ERROR_NOT_TUNED);
    CHECK_THAT(qjit_last_error(), Catch::Contains("no kernel"));
  }
  CHECK(cache::Store(db).list().empty());  // nothing compiled or stored
  EnvVar log("QJIT_LOG", "1");
  std::string err = stderr_of([&] { w8a8_gemm(c.shape, c.args); });
  CHECK_THAT(err, Catch::Contains("not in") && Catch::Contains("compiling the default config, untuned"));
  set_cache_path(db);  // a fresh process's view: the stored untuned row is loaded
  err = stderr_of([&] { w8a8_gemm(c.shape, c.args); });
  CHECK_THAT(err, Catch::Contains("loaded the untuned (default config) kernel") && Catch::Contains("tune it"));
  err = stderr_of([&] { w8a8_gemm(c.shape, c.args); });
  CHECK(err.empty());  // a hit in memory says nothing
}

TEST_CASE("runtime rules: Preload launches nothing; a graph captured after it runs the op", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("preload.db"));
  Case c = w8a8_case(128);
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
