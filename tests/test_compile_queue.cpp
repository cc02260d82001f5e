// The tuner's compile queue (tuner/compile_queue.h): sources that differ
// only in their header comment compile once, results come back as each
// compile finishes, a stop leaves the rest unstarted.
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codegen/error.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/spec.h"
#include "tuner/compile_queue.h"

TEST_CASE("compile queue: identical sources compile once; results come back as each finishes", "[tuner]") {
  using namespace qjit;
  // fp_lut's blocks_per_sm changes only the launch geometry: its configs differ in the header comment alone.
  const auto spec = codegen::parse_spec("fp_lut", "n=1048576,fn=silu");
  const auto space = codegen::find_op("fp_lut").tunable_space(spec);
  std::vector<codegen::GeneratedSource> sources;
  std::set<std::string> keys;
  for (const auto& c : space) {
    sources.push_back(codegen::generate_source(spec, c));
    keys.insert(tuner::compile_key(sources.back(), "sm_90"));
  }
  REQUIRE(keys.size() > 1);
  REQUIRE(keys.size() < space.size());
  // The key ignores the header only: another arch, or one changed line of code, is another compile.
  CHECK(tuner::compile_key(sources[0], "sm_80") != tuner::compile_key(sources[0], "sm_90"));
  codegen::GeneratedSource edited = sources[0];
  edited.text += "// trailing comment\n";
  CHECK(tuner::compile_key(edited, "sm_90") != tuner::compile_key(sources[0], "sm_90"));

  std::atomic<int> compiled{0};
  const tuner::CompileFn fake = [&](const codegen::GeneratedSource& src, const std::string& arch) {
    ++compiled;
    codegen::CompileResult r;
    r.ok = true;
    r.arch = arch;
    r.cubin = tuner::compile_key(src, arch);  // stands for the binary of this source
    return r;
  };
  tuner::CompileQueue queue("sm_90", 4, fake);
  for (size_t i = 0; i < sources.size(); ++i) queue.add(i, sources[i]);
  std::set<size_t> back;
  size_t reused = 0;
  while (const auto id = queue.next()) {
    CHECK(back.insert(*id).second);
    CHECK(queue.started(*id));
    CHECK(queue.result(*id).cubin == tuner::compile_key(sources[*id], "sm_90"));
    reused += queue.reused(*id);
  }
  CHECK(back.size() == sources.size());
  CHECK(compiled == static_cast<int>(keys.size()));
  CHECK(queue.compiles() == keys.size());
  CHECK(reused == sources.size() - keys.size());
  // Added later, a source compiled before comes back at once, reused.
  queue.add(sources.size(), sources[0]);
  CHECK(queue.next() == std::optional<size_t>(sources.size()));
  CHECK(queue.reused(sources.size()));
  CHECK(compiled == static_cast<int>(keys.size()));
  CHECK_FALSE(queue.next().has_value());
}

TEST_CASE("compile queue: a stop leaves the rest unstarted after one compile; a throwing compile is a failed one",
          "[tuner]") {
  using namespace qjit;
  std::vector<codegen::GeneratedSource> sources(6);
  for (size_t i = 0; i < sources.size(); ++i) sources[i].text = "int k" + std::to_string(i) + ";\n";
  std::atomic<int> compiled{0};
  const tuner::CompileFn fake = [&](const codegen::GeneratedSource& src, const std::string&) {
    ++compiled;
    if (src.text.find("k3") != std::string::npos) throw Error("nvrtc", "cannot compile k3");
    codegen::CompileResult r;
    r.ok = true;
    return r;
  };
  SECTION("stop") {
    tuner::CompileQueue queue("sm_90", 1, fake, [] { return true; });
    for (size_t i = 0; i < sources.size(); ++i) queue.add(i, sources[i]);
    int started = 0, unstarted = 0;
    while (const auto id = queue.next()) (queue.started(*id) ? started : unstarted)++;
    CHECK(started == 1);
    CHECK(unstarted == 5);
    CHECK(compiled == 1);
  }
  SECTION("throw") {
    tuner::CompileQueue queue("sm_90", 2, fake);
    for (size_t i = 0; i < sources.size(); ++i) queue.add(i, sources[i]);
    while (const auto id = queue.next()) {
      INFO(*id);
      CHECK(queue.result(*id).ok == (*id != 3));
      if (*id == 3) CHECK_THAT(queue.result(*id).log, Catch::Contains("cannot compile k3"));
    }
  }
}
