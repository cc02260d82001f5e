// Several GPUs in one process (DESIGN.md "Runtime rules": the caller's
// current context and device; each device gets its own modules). A call
// runs in whatever context the caller has current, interleaved device 1,
// 0, 1, ..., on that device's own stream, and leaves that context current;
// device 1's first call loads the row device 0 stored into device 1's
// context; a row tuned on device 0 serves device 1 when both are the same
// kind (the cache key names the GPU kind, not the ordinal).
//
// Needs two CUDA devices; with fewer each case says so (a warning) and
// checks nothing. tests/gpu_multi.sh runs these in a fresh process
// (`qjit_tests "[gpu][multi_gpu]"`), where no context exists before the
// first case: the first case can then check that work on device 1 never
// creates device 0's primary context.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <string>
#include <vector>

#include "cache/store.h"
#include "qjit/qjit.h"
#include "qjit/qjit_c.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"

using namespace qjit;

namespace {

// Device i's primary context, retained (never released: the runtime keeps modules loaded in it).
CUcontext primary(int ordinal) {
  CUdevice d = 0;
  QJIT_CU(cuDeviceGet(&d, ordinal));
  CUcontext c = nullptr;
  QJIT_CU(cuDevicePrimaryCtxRetain(&c, d));
  return c;
}

// Whether device `ordinal`'s primary context exists. The driver's own entry (the runtime's table has
// no use for it): libcuda is loaded already, by the runtime.
bool primary_active(int ordinal) {
  using GetState = CUresult (*)(CUdevice, unsigned*, int*);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib != nullptr);
  const auto get_state = reinterpret_cast<GetState>(dlsym(lib, "cuDevicePrimaryCtxGetState"));
  REQUIRE(get_state != nullptr);
  CUdevice d = 0;
  QJIT_CU(cuDeviceGet(&d, ordinal));
  unsigned flags = 0;
  int active = 0;
  REQUIRE(get_state(d, &flags, &active) == CUDA_SUCCESS);
  dlclose(lib);
  return active != 0;
}

std::string device_name(int ordinal) {
  CUdevice d = 0;
  QJIT_CU(cuDeviceGet(&d, ordinal));
  char name[256] = {};
  QJIT_CU(cuDeviceGetName(name, sizeof name, d));
  return name;
}

// False (with a warning naming the reason) when fewer than two devices are visible.
bool two_devices() {
  int count = 0;
  QJIT_CU(cuDeviceGetCount(&count));
  if (count >= 2) return true;
  WARN("SKIPPED: needs 2 CUDA devices, " << count << " visible");
  return false;
}


// One device's context, its own stream and a w8a8_gemm workload allocated there.
struct OnDevice {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  test::W8a8Case c;
};

}  // namespace

TEST_CASE("several GPUs: each call runs in the caller's current context, interleaved", "[gpu][multi_gpu]") {
  if (!two_devices()) return;
  // Before anything in this process touches device 0 (run alone, as tests/gpu_multi.sh does).
  const bool device0_untouched = !primary_active(0);
  test::TempDir dir;
  set_cache_path(dir.file("multi.db"));
  test::EnvVar log("QJIT_LOG", "1");
  std::vector<OnDevice> dev(2);
  for (int i : {1, 0}) {  // device 1 first: its work must not need device 0
    dev[i].context = primary(i);
    QJIT_CU(cuCtxSetCurrent(dev[i].context));
    QJIT_CU(cuStreamCreate(&dev[i].stream, CU_STREAM_NON_BLOCKING));
    dev[i].c = test::w8a8_case(64);
    if (i == 1) {
      // The first call anywhere: a miss, compiled and stored from device 1's context.
      OnDevice& d = dev[1];
      d.c.work->poison_output(d.stream);
      const std::string err = test::stderr_of(
          [&] { w8a8_gemm(d.c.shape, d.c.args, reinterpret_cast<CUstream_st*>(d.stream)); });
      CHECK(test::count_of(err, "compiling the default config") == 1);
      QJIT_CU(cuStreamSynchronize(d.stream));
      const auto v = d.c.work->verify(1.0);
      INFO(v.message);
      CHECK(v.ok);
      if (device0_untouched)
        CHECK_FALSE(primary_active(0));  // no work, no module, no context on device 0
      else
        WARN("device 0's primary context was active before the first case: 'nothing on device 0' not checked");
    }
  }
  // Device 0's first call: its own modules, loaded from the row device 1 stored (when they are one kind),
  // or compiled for its own kind.
  {
    QJIT_CU(cuCtxSetCurrent(dev[0].context));
    OnDevice& d = dev[0];
    const std::string err = test::stderr_of(
        [&] { w8a8_gemm(d.c.shape, d.c.args, reinterpret_cast<CUstream_st*>(d.stream)); });
    if (device_name(0) == device_name(1))
      CHECK(test::count_of(err, "loaded the untuned (default config) kernel") == 1);
    else
      CHECK(test::count_of(err, "compiling the default config") == 1);
  }
  // Interleaved: each call in the context current at the time, on that device's stream, through the
  // C++ and the C API; the caller's context is current afterwards; hits say nothing.
  for (int i : {1, 0, 0, 1, 0, 1, 1}) {
    OnDevice& d = dev[i];
    QJIT_CU(cuCtxSetCurrent(d.context));
    INFO("device " << i);
    d.c.work->poison_output(d.stream);
    const std::string err = test::stderr_of(
        [&] { w8a8_gemm(d.c.shape, d.c.args, reinterpret_cast<CUstream_st*>(d.stream)); });
    CHECK(err.empty());
    CHECK(test::current_context() == d.context);
    QJIT_CU(cuStreamSynchronize(d.stream));
    auto v = d.c.work->verify(1.0);
    INFO(v.message);
    CHECK(v.ok);
    d.c.work->poison_output(d.stream);
    const qjit_w8a8_gemm_args a = test::c_args(d.c);
    REQUIRE(qjit_w8a8_gemm(&a, d.stream) == QJIT_OK);
    CHECK(test::current_context() == d.context);
    QJIT_CU(cuStreamSynchronize(d.stream));
    v = d.c.work->verify(1.0);
    INFO(v.message);
    CHECK(v.ok);
  }
  for (auto& d : dev) {
    QJIT_CU(cuCtxSetCurrent(d.context));
    QJIT_CU(cuStreamDestroy(d.stream));
  }
  QJIT_CU(cuCtxSetCurrent(dev[0].context));
}

TEST_CASE("several GPUs: a row tuned on device 0 serves device 1 of the same kind", "[gpu][multi_gpu]") {
  if (!two_devices()) return;
  if (device_name(0) != device_name(1)) {
    WARN("SKIPPED: devices 0 and 1 differ (" << device_name(0) << ", " << device_name(1)
                                             << "): each kind has its own rows");
    return;
  }
  test::TempDir dir;
  const std::string db = dir.file("tuned.db");
  const CUcontext c0 = primary(0), c1 = primary(1);
  QJIT_CU(cuCtxSetCurrent(c0));
  const auto spec = codegen::parse_spec("w8a8_gemm", "k=256,n=80,m=16,block=64");
  {
    cache::Store store(db);
    test::expect_every_candidate_verifies(store, spec, false, 6);  // tuned on device 0
    REQUIRE(store.list().size() == 1);
  }
  set_cache_path(db);  // nothing loaded: device 1 must read the row
  QJIT_CU(cuCtxSetCurrent(c1));
  test::W8a8Case c = test::w8a8_case(80);
  c.work->poison_output(nullptr);
  {
    test::EnvVar require("QJIT_REQUIRE_TUNED", "1");  // an untuned or missing row would be an error
    test::EnvVar log("QJIT_LOG", "1");
    const std::string err = test::stderr_of([&] { w8a8_gemm(c.shape, c.args); });
    CHECK_THAT(err, Catch::Contains("loaded the tuned kernel") && Catch::Contains(device_name(1)));
  }
  CHECK(test::current_context() == c1);
  QJIT_CU(cuCtxSynchronize());
  const auto v = c.work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
  CHECK(cache::Store(db).list().size() == 1);  // the same row: nothing compiled or stored for device 1
  QJIT_CU(cuCtxSetCurrent(c0));
}
