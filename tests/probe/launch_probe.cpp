// qjit_launch_probe: what an inference engine sees. Links qjit_runtime only
// (never the tuner). Prints, as one JSON line:
//   first_launch_ms_since_exec: process start (kernel's exec time) → first
//     fused_ffn launch returned and synchronized, cache warm or not;
//   hit_overhead_us: host time of one cache-hit qjit::fused_ffn call (median
//     of batches of 1000 calls, enqueue only);
//   bare_launch_us: the same kernel through cuLaunchKernel alone, so that
//     hit_overhead_us - bare_launch_us is what qjit adds.
// Usage: qjit_launch_probe [d h m dtype]   (cache: $QJIT_CACHE)
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>
#include "qjit/qjit.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"

// Seconds since boot at which this process was started (field 22 of /proc/self/stat).
static double process_start_s() {
  std::ifstream f("/proc/self/stat");
  std::string s((std::istreambuf_iterator<char>(f)), {});
  size_t p = s.rfind(')');
  std::vector<std::string> fields;
  size_t pos = p + 2;
  while (pos < s.size()) {
    size_t sp = s.find(' ', pos);
    fields.push_back(s.substr(pos, sp - pos));
    if (sp == std::string::npos) break;
    pos = sp + 1;
  }
  return std::stod(fields.at(19)) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

static double now_since_boot_s() {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int d = argc > 1 ? std::atoi(argv[1]) : 4096, h = argc > 2 ? std::atoi(argv[2]) : 11008,
            m = argc > 3 ? std::atoi(argv[3]) : 1;
  const std::string dt = argc > 4 ? argv[4] : "fp16";
  const qjit::DType dtype = dt == "bf16" ? qjit::DType::bf16 : dt == "fp32" ? qjit::DType::fp32
                            : dt == "mixed" ? qjit::DType::mixed : qjit::DType::fp16;
  try {
    const double t_main = now_since_boot_s();
    qjit::runtime::current_device();
    const double t_device = now_since_boot_s();
    const size_t xe = (dt == "fp32" || dt == "mixed") ? 4 : 2, we = dt == "fp32" ? 4 : 2;
    CUdeviceptr x, w1, w3, y;
    QJIT_CU(cuMemAlloc(&x, size_t(m) * d * xe));
    QJIT_CU(cuMemAlloc(&w1, size_t(h) * d * we));
    QJIT_CU(cuMemAlloc(&w3, size_t(h) * d * we));
    QJIT_CU(cuMemAlloc(&y, size_t(m) * h * xe));
    qjit::FusedFfnShape s{d, h, m, dtype};
    auto call = [&] {
      qjit::fused_ffn(s, reinterpret_cast<void*>(x), reinterpret_cast<void*>(w1), reinterpret_cast<void*>(w3),
                      reinterpret_cast<void*>(y), nullptr);
    };
    const double t_alloc = now_since_boot_s();
    call();
    QJIT_CU(cuCtxSynchronize());
    const double t_first = now_since_boot_s();
    const double first_ms = (t_first - process_start_s()) * 1e3;
    std::vector<double> per_call;
    for (int rep = 0; rep < 7; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 1000; ++i) call();
      auto t1 = std::chrono::steady_clock::now();
      per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 1000);
      QJIT_CU(cuCtxSynchronize());
    }
    std::sort(per_call.begin(), per_call.end());
    // The same cached kernel, launched with no qjit code in between.
    const auto& k = qjit::runtime::KernelCache::instance().get("probe", [&] {
      return qjit::codegen::make_spec("fused_ffn", {{"d", d}, {"h", h}, {"m", m}, {"dtype", dt}});
    });
    qjit::FusedFfnArgs fa;
    fa.x = reinterpret_cast<void*>(x), fa.w1 = reinterpret_cast<void*>(w1), fa.w3 = reinterpret_cast<void*>(w3);
    fa.y = reinterpret_cast<void*>(y);
    const qjit::ArgPack args = fa.pack();
    std::vector<double> bare;
    for (int rep = 0; rep < 7; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 1000; ++i)
        if (qjit::runtime::launch_kernel(k, 0, args, nullptr) != CUDA_SUCCESS) throw qjit::Error("driver", "launch failed");
      auto t1 = std::chrono::steady_clock::now();
      bare.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 1000);
      QJIT_CU(cuCtxSynchronize());
    }
    std::sort(bare.begin(), bare.end());
    // Where the first launch's time goes: exec → main (loader), driver init +
    // primary context, buffer allocation, first qjit call (cache open, lookup,
    // module load, launch) + synchronize.
    std::printf("{\"d\":%d,\"h\":%d,\"m\":%d,\"dtype\":\"%s\",\"first_launch_ms_since_exec\":%.1f,"
                "\"exec_to_main_ms\":%.1f,\"driver_and_context_ms\":%.1f,\"alloc_ms\":%.1f,"
                "\"first_call_ms\":%.1f,\"hit_overhead_us\":%.2f,\"bare_launch_us\":%.2f}\n",
                d, h, m, dt.c_str(), first_ms, (t_main - process_start_s()) * 1e3, (t_device - t_main) * 1e3,
                (t_alloc - t_device) * 1e3, (t_first - t_alloc) * 1e3, per_call[per_call.size() / 2], bare[bare.size() / 2]);
  } catch (const qjit::Error& e) {
    std::fprintf(stderr, "qjit_launch_probe: %s\n%s\n", e.what(), e.detail().c_str());
    return 1;
  }
  return 0;
}
