// Tests for codegen/nvrtc.*: every candidate of the tunable space compiles for
// sm_80 and sm_90 (no GPU needed), the defaults without spilling, compile errors are
// reported with the template line that caused them, bad arches are refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/error.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/spec.h"

using namespace qjit::codegen;
using json = nlohmann::json;

namespace {

struct Job {
  OpSpec spec;
  json config;
  std::string arch;
  CompileResult res;
  std::string error;  // exception text, if compile threw
};

// Compiles every job on `threads` threads; Catch assertions stay on the caller's thread.
void compile_all(std::vector<Job>& jobs, int threads) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      try {
        jobs[i].res = compile(generate_source(jobs[i].spec, jobs[i].config), jobs[i].arch);
      } catch (const std::exception& e) {
        jobs[i].error = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
}

std::string insert_line(const std::string& text, int before_line, const std::string& line) {
  std::istringstream is(text);
  std::string out, l;
  for (int n = 1; std::getline(is, l); ++n) {
    if (n == before_line) out += line + "\n";
    out += l + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("nvrtc: every tunable candidate compiles for sm_80 and sm_90", "[nvrtc]") {
  const auto& op = find_op("fused_ffn");
  const std::vector<OpSpec> specs = {
      parse_spec("fused_ffn", "d=4096,h=11008,dtype=fp16,m=1"),
      parse_spec("fused_ffn", "d=4095,h=37,dtype=bf16,m=8"),
      parse_spec("fused_ffn", "d=1000,h=64,m=3,dtype=mixed"),
      parse_spec("fused_ffn", "d=256,h=256,dtype=fp32,m=5"),
  };
  // Every candidate of the first spec for both arches. For the others, to stay
  // well under 90 s on 2 cores: sm_80 compiles the even-numbered candidates and
  // sm_90 the odd ones (so every candidate is compiled once), plus the default
  // for both. NVRTC is thread-safe: two threads share the list.
  std::vector<Job> jobs;
  for (size_t s = 0; s < specs.size(); ++s) {
    const auto space = op.tunable_space(specs[s]);
    REQUIRE(!space.empty());
    for (size_t a = 0; a < 2; ++a) {
      const std::string arch = a == 0 ? "sm_80" : "sm_90";
      for (size_t i = 0; i < space.size(); ++i)
        if (s == 0 || i % 2 == a) jobs.push_back({specs[s], space[i], arch, {}, {}});
      if (s != 0) jobs.push_back({specs[s], op.default_config(specs[s]), arch, {}, {}});
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  compile_all(jobs, 2);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[nvrtc] compiled " << jobs.size() << " candidates in " << secs << " s on 2 threads\n";
  std::vector<std::string> spilling;
  for (const auto& j : jobs) {
    INFO(j.spec.label() << " " << j.config.dump() << " " << j.arch << "\nerror: " << j.error << "\nlog:\n"
                        << j.res.log);
    REQUIRE(j.error.empty());
    CHECK(j.res.ok);
    CHECK(j.res.arch == j.arch);
    CHECK(j.res.cubin.size() > 4);
    CHECK(j.res.cubin.compare(0, 4, "\x7f" "ELF") == 0);
    CHECK(j.res.ptx.find(".target " + j.arch) != std::string::npos);
    const bool cublas = j.config.value("family", "") == "cublas";
    CHECK(j.res.ptx.find(cublas ? ".entry qjit_fused_ffn_swiglu" : ".entry qjit_fused_ffn") != std::string::npos);
    CHECK(j.res.registers > 0);
    CHECK(j.res.registers <= 255);
    CHECK(j.res.spill_bytes >= 0);  // reported
    if (j.res.spill_bytes > 0) {
      spilling.push_back(j.spec.label() + " " + j.arch + " " + j.config.dump() + ": " +
                         std::to_string(j.res.spill_bytes) + " bytes spilled at " + std::to_string(j.res.registers) +
                         " registers");
      // a spill only happens where ptxas hit its register ceiling
      CHECK(j.res.registers >= 64);
      // the default config is launched untuned on a runtime miss, where nothing prunes it
      CHECK(j.config != op.default_config(j.spec));
    }
    CHECK(j.res.stack_bytes >= 0);
    CHECK(j.res.compile_ms > 0);
    if (cublas) {  // an elementwise kernel: no shared memory, no spills
      CHECK(j.res.shared_bytes == 0);
      CHECK(j.res.spill_bytes == 0);
      continue;
    }
    // split_d > 1 adds the partial sums in static shared memory:
    //   simt: kWarps x 2·kM·kRowsPerWarp floats; mma: kWarps x kTiles x 8 x 32 floats
    const int64_t split = j.config["split_d"], warps = j.config["warps"];
    const int64_t per_warp = j.config.value("family", "simt") == "mma"
                                 ? j.config["tiles"].get<int64_t>() * 8 * 32
                                 : 2 * j.spec.get_int("m") * j.config["rows_per_warp"].get<int64_t>();
    CHECK(j.res.shared_bytes == (split > 1 ? warps * per_warp * 4 : 0));
  }
  // Spilling candidates are pruned by the tuner (resource_error) before any GPU
  // time, so a few are tolerated; they must stay rare. With the template's
  // __launch_bounds__(kThreads) ptxas caps these kernels at 64 registers, and
  // some m>=5 / rows_per_warp>=2 candidates spill a few bytes (see the list).
  std::string list;
  for (auto& s : spilling) list += "\n  " + s;
  if (!spilling.empty()) WARN(spilling.size() << " of " << jobs.size() << " candidates spill:" << list);
  CHECK(spilling.size() * 50 <= jobs.size());
}

TEST_CASE("nvrtc: a syntax error is reported at its template line", "[nvrtc]") {
  const auto& op = find_op("fused_ffn");
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  // One source per kernel family (the default of each shape plus one candidate per family).
  std::vector<GeneratedSource> sources;
  std::set<std::string> templates;
  for (const char* shape : {"d=256,h=64", "d=4096,h=64,m=4"}) {
    const OpSpec spec = parse_spec("fused_ffn", shape);
    std::vector<json> configs = {op.default_config(spec)};
    for (const auto& c : op.tunable_space(spec)) configs.push_back(c);
    for (const auto& c : configs) {
      auto src = generate_source(spec, c);
      if (templates.insert(src.template_path).second) sources.push_back(src);
    }
  }
  REQUIRE(!sources.empty());
  for (const auto& src : sources) {
    INFO(src.template_path);
    const auto tmpl = [&] {
      std::vector<std::string> out;
      std::istringstream is(src.text);
      int n = 0;
      for (std::string l; std::getline(is, l);)
        if (++n >= src.template_first_line) out.push_back(l);
      return out;
    }();
    REQUIRE(tmpl.size() > 10);
    // Template lines before which a new statement is still code, not comment:
    // a top-level `using`/`constexpr`, the kernel's `extern "C"`, and the
    // kernel's closing brace (the last line of the file).
    std::vector<int> targets;
    for (size_t i = 0; i < tmpl.size(); ++i) {
      const std::string& l = tmpl[i];
      if (l.rfind("using namespace", 0) == 0 || l.rfind("constexpr int", 0) == 0 || l.rfind("extern \"C\"", 0) == 0)
        targets.push_back(static_cast<int>(i + 1));
    }
    int last = static_cast<int>(tmpl.size());
    while (last > 1 && tmpl[last - 1] != "}") --last;
    REQUIRE(tmpl[last - 1] == "}");
    targets.push_back(last);
    REQUIRE(targets.size() >= 3);
    // all the structural ones plus a random pick among them again (fresh each run)
    targets.push_back(targets[rng() % targets.size()]);
    for (int t : targets) {
      INFO("garbage before template line " << t << ": " << tmpl[t - 1]);
      GeneratedSource bad = src;
      bad.text = insert_line(src.text, src.template_first_line + t - 1, "int qjit_injected = @@@ garbage;");
      const auto res = compile(bad, rng() % 2 ? "sm_80" : "sm_90");
      INFO("log:\n" << res.log);
      CHECK_FALSE(res.ok);
      CHECK(res.cubin.empty());
      const std::string where = "fused_ffn.cu(" + std::to_string(src.template_first_line + t - 1) + "): [" +
                                src.template_path + ":" + std::to_string(t) + "]";
      CHECK(res.log.find(where) != std::string::npos);
      CHECK(res.log.find("error") != std::string::npos);
    }
    // an error in the preamble is attributed to it
    GeneratedSource bad = src;
    bad.text = insert_line(src.text, 8, "constexpr int kBroken = ;");
    const auto res = compile(bad, "sm_90");
    INFO("log:\n" << res.log);
    CHECK_FALSE(res.ok);
    CHECK(res.log.find("fused_ffn.cu(8): [generated preamble]") != std::string::npos);
    // the unmodified source compiles
    CHECK(compile(src, "sm_80").ok);
  }
  CHECK(templates.count("templates/fused_ffn/fused_ffn.cu") == 1);
}

TEST_CASE("nvrtc: bad arch strings are refused before compiling", "[nvrtc]") {
  const OpSpec spec = parse_spec("fused_ffn", "d=256,h=64");
  const auto src = generate_source(spec, find_op("fused_ffn").default_config(spec));
  for (const char* arch : {"sm_1", "", "sm_", "compute_80", "sm_80x", "80", "sm_9999"}) {
    INFO("arch '" << arch << "'");
    CHECK_FALSE(nvrtc_supports_arch(arch));
    bool threw = false;
    try {
      compile(src, arch);
    } catch (const qjit::Error& e) {
      threw = true;
      CHECK(e.stage() == "nvrtc");
      CHECK(std::string(e.what()).find("'" + std::string(arch) + "'") != std::string::npos);
    }
    CHECK(threw);
  }
  CHECK(nvrtc_supports_arch("sm_80"));
  CHECK(nvrtc_supports_arch("sm_90"));
}

TEST_CASE("nvrtc: version string", "[nvrtc]") {
  const std::string v = nvrtc_version();
  INFO(v);
  std::smatch m;
  REQUIRE(std::regex_match(v, m, std::regex(R"((\d+)\.(\d+))")));
  CHECK(std::stoi(m[1].str()) >= 12);
}
