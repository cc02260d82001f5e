// qjit doctor: what this machine offers qjit (driver, NVRTC, GPU, bandwidth, cache).
#include <filesystem>
#include <iostream>
#include <memory>
#include "cache/compile_cache.h"
#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "runtime/device.h"
#include "codegen/registry.h"
#include "runtime/kernel_cache.h"
#include "tuner/timing.h"

namespace qjit::cli {

void add_doctor(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("doctor", "driver, NVRTC, GPU, copy bandwidth, cache path and size");
  cmd->footer(kExitCodesHelp);
  struct Opts {
    CacheOption cache;
    bool json = false, measure = false;
  };
  auto o = std::make_shared<Opts>();
  o->cache.add_to(cmd);
  cmd->add_flag("--json", o->json, "JSON output");
  cmd->add_flag("--measure", o->measure, "measure copy bandwidth now even if it is stored");
  cmd->callback([o, &rc] {
    nlohmann::json j;
    j["qjit_version"] = QJIT_VERSION;
    j["nvrtc_version"] = codegen::nvrtc_version();
    j["nvrtc_sm_80"] = codegen::nvrtc_supports_arch("sm_80");
    j["nvrtc_sm_90"] = codegen::nvrtc_supports_arch("sm_90");
    for (const auto* op : codegen::all_ops()) j["templates_hash"][op->name()] = runtime::templates_hash(op->name());
    std::string why;
    const bool gpu = runtime::gpu_available(&why);
    j["gpu"] = gpu;
    rc = kOk;
    std::unique_ptr<cache::Store> store;
    try {
      store = std::make_unique<cache::Store>(o->cache.resolved());
      j["cache"] = {{"path", store->path()},
                    {"bytes", store->file_bytes()},
                    {"kernels", store->list(false).size()},
                    {"schema_version", store->schema_version()}};
    } catch (const Error& e) {
      j["cache"] = {{"path", o->cache.resolved()}, {"error", e.what()}};
      rc = kFailed;
    }
    {
      // (Not created here: a tune creates it.)
      const std::string path = cache::CompileCache::default_path();
      std::error_code ec;
      const auto bytes = path.empty() ? 0 : std::filesystem::file_size(path, ec);
      if (path.empty()) {
        j["compile_cache"] = {{"path", ""}, {"off", "QJIT_COMPILE_CACHE is empty"}};
      } else if (ec) {
        j["compile_cache"] = {{"path", path}, {"bytes", 0}, {"compiles", 0}};
      } else {
        cache::CompileCache cc(path);
        j["compile_cache"] = {{"path", path}, {"bytes", bytes}, {"compiles", cc.rows()}};
        if (!cc.enabled()) j["compile_cache"]["off"] = cc.why();
      }
    }
    if (gpu) {
      const auto& d = runtime::current_device();
      j["device"] = {{"name", d.identity.name},       {"compute_capability", d.identity.compute_capability},
                     {"sm_count", d.identity.sm_count}, {"driver_version", d.identity.driver_version},
                     {"arch", d.arch},                 {"l2_bytes", d.l2_bytes},
                     {"memory_bytes", d.memory_bytes}};
      std::optional<double> bw;
      if (store && !o->measure) bw = store->copy_bandwidth_gbps(d.key());
      if (!bw) {
        bw = tuner::measure_copy_bandwidth_gbps();
        if (store) store->set_copy_bandwidth_gbps(d.key(), *bw);
      }
      j["copy_gbps"] = *bw;
    } else {
      j["no_gpu_reason"] = why;
    }
    if (o->json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << "qjit      " << QJIT_VERSION << "\nNVRTC     " << j["nvrtc_version"].get<std::string>()
              << " (sm_80 " << (j["nvrtc_sm_80"].get<bool>() ? "yes" : "no") << ", sm_90 "
              << (j["nvrtc_sm_90"].get<bool>() ? "yes" : "no") << ")\n";
    if (gpu) {
      const auto& d = j["device"];
      std::cout << "GPU       " << d["name"].get<std::string>() << ", cc " << d["compute_capability"].get<std::string>()
                << ", " << d["sm_count"] << " SMs, " << human_bytes(d["memory_bytes"].get<double>()) << ", L2 "
                << human_bytes(d["l2_bytes"].get<double>()) << "\ndriver    " << d["driver_version"]
                << fmt("\ncopy bw   %.0f GB/s (device-to-device, read + write)\n", j["copy_gbps"].get<double>());
    } else {
      std::cout << "GPU       none: " << why << " (compiling and `qjit source` still work)\n";
    }
    if (j["cache"].contains("error"))
      std::cout << "cache     " << j["cache"]["error"].get<std::string>() << "\n";
    else
      std::cout << "cache     " << j["cache"]["path"].get<std::string>() << ", "
                << human_bytes(j["cache"]["bytes"].get<double>()) << ", " << j["cache"]["kernels"] << " kernel(s)\n";
    const auto& cc = j["compile_cache"];
    if (cc.contains("off"))
      std::cout << "compiles  off: " << cc["off"].get<std::string>() << "\n";
    else
      std::cout << "compiles  " << cc["path"].get<std::string>() << ", " << human_bytes(cc["bytes"].get<double>())
                << ", " << cc["compiles"] << " kept for later tunes\n";
  });
}

}  // namespace qjit::cli
