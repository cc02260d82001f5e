#include "tuner/bench.h"
#include <cstdio>
#include <random>
#include "cache/record.h"
#include "codegen/registry.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/ops.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {

BenchReport bench(const codegen::OpSpec& spec, cache::Store& store, double sustain_s) {
  const runtime::Device& dev = runtime::current_device();
  const auto& op = codegen::find_op(spec.op);
  BenchReport rep;
  rep.spec_label = spec.label();
  rep.device = dev.identity.name;
  rep.bytes = op.traffic(spec).bytes;
  rep.copy_gbps = measure_copy_bandwidth_gbps();  // in this run, as the floor's denominator
  rep.floor_us = rep.bytes / (rep.copy_gbps * 1e3);
  rep.sustain_s = sustain_s;

  auto rec = store.lookup(runtime::fingerprint(spec).key());
  if (!rec) rec = cache::build_record(runtime::fingerprint(spec), spec, op.default_config(spec), dev.arch, false);
  rep.tuned = rec->tuned;
  const runtime::LoadedPlan plan = runtime::load_record(*rec, spec);
  const runtime::PlanGuard guard{plan};

  auto work = make_workload(spec, std::random_device{}(), dev.l2_bytes);
  CUstream stream = nullptr;
  QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const runtime::RunPlan run_plan = op_hooks(spec.op).run;
  const auto call = [&](int copy) {
    const CUresult r = run_plan(plan, work->args(copy), stream);
    if (r != CUDA_SUCCESS) throw Error("driver", spec.label() + ": launch failed: " + runtime::describe(r));
  };
  // A row: `run` timed, verified as `v` says.
  auto add_row = [&](const std::string& name, const std::function<void(int)>& run, const Verification& v,
                     bool checked) {
    Timing t = time_launches(run, stream, 10, 31, 10);
    rep.rows.push_back({name, t.median_us, rep.bytes / (t.median_us * 1e3), 100 * rep.floor_us / t.median_us,
                        v.rel_error, v.ok, "", 0, checked});
    if (sustain_s > 0) {
      std::fprintf(stderr, "  %s: %.1f s back to back\n", name.c_str(), sustain_s);
      rep.rows.back().sustained_us = time_sustained(run, stream, sustain_s, t.median_us).median_us;
    }
  };
  work->poison_output(stream);
  call(0);
  QJIT_CU(cuStreamSynchronize(stream));
  add_row(rec->tuned ? "qjit (tuned)" : "qjit (untuned default)", [&](int i) { call(i % work->copies()); },
          work->verify(1.0), true);
  rep.rows.back().config = rec->config.dump();
  std::string why;
  for (auto& b : work->baselines(&why))
    add_row(b.name, [&](int i) { b.run(i % work->copies(), stream); }, check_baseline(*work, b, stream), b.checked);
  QJIT_CU(cuStreamSynchronize(stream));
  runtime::driver().cuStreamDestroy(stream);
  return rep;
}

nlohmann::json BenchReport::to_json() const {
  nlohmann::json j = {{"spec", spec_label}, {"device", device},   {"copy_gbps", copy_gbps},
                      {"bytes", bytes},     {"floor_us", floor_us}, {"tuned", tuned}};
  j["rows"] = nlohmann::json::array();
  for (auto& r : rows)
    j["rows"].push_back({{"name", r.name},
                         {"median_us", r.median_us},
                         {"gbps", r.gbps},
                         {"pct_of_floor", r.pct_of_floor},
                         {"rel_error", r.checked ? nlohmann::json(r.rel_error) : nlohmann::json(nullptr)},
                         {"verified", r.verified},
                         {"checked", r.checked},
                         {"speedup_of_qjit", rows[0].median_us > 0 ? r.median_us / rows[0].median_us : 0},
                         {"config", r.config}});
  if (sustain_s > 0) {
    j["sustain_s"] = sustain_s;
    for (size_t i = 0; i < rows.size(); ++i) {
      j["rows"][i]["sustained_us"] = rows[i].sustained_us;
      j["rows"][i]["sustained_speedup_of_qjit"] = rows[0].sustained_us > 0 ? rows[i].sustained_us / rows[0].sustained_us : 0;
    }
  }
  return j;
}

std::string BenchReport::table() const {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "%s on %s: floor %.2f us (%.1f MB at %.0f GB/s copy bandwidth)\n",
                spec_label.c_str(), device.c_str(), floor_us, bytes / 1e6, copy_gbps);
  s += line;
  std::snprintf(line, sizeof line, "  %-26s %10s %9s %9s %10s %9s", "kernel", "us", "GB/s", "% floor", "qjit x",
                "rel err");
  s += line;
  if (sustain_s > 0) {
    std::snprintf(line, sizeof line, " %14s %10s", "sustained us", "qjit x");
    s += line;
  }
  s += "\n";
  for (auto& r : rows) {
    std::snprintf(line, sizeof line, "  %-26s %10.2f %9.0f %8.1f%% %9.2fx", r.name.c_str(), r.median_us, r.gbps,
                  r.pct_of_floor, r.median_us / rows[0].median_us);
    s += line;
    if (r.checked) std::snprintf(line, sizeof line, " %9.1e", r.rel_error);
    else std::snprintf(line, sizeof line, " %9s", "n/a");
    s += line;
    if (sustain_s > 0) {
      std::snprintf(line, sizeof line, " %14.2f %9.2fx", r.sustained_us, r.sustained_us / rows[0].sustained_us);
      s += line;
    }
    s += r.verified ? "\n" : r.checked ? "  (NOT VERIFIED)\n" : "  (timed only: writes a scratch output)\n";
  }
  if (sustain_s > 0) {
    std::snprintf(line, sizeof line, "  (sustained: each kernel looped for %.1f s, the second half timed)\n", sustain_s);
    s += line;
  }
  return s;
}

}  // namespace qjit::tuner
