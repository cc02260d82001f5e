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
