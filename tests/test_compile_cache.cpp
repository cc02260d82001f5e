// The compile cache kept across runs (cache/compile_cache.h) and the tuner's
// compile function in front of it (tuner/compile_queue.h, cached_compile):
// a source compiled once is never compiled again by a later run, whatever
// its header comment; damage, a foreign file or an empty path only turn it
// off or miss; the size cap drops the least recently used.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/compile_cache.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/spec.h"
#include "helpers.h"
#include "tuner/compile_queue.h"

using namespace qjit;

namespace {

codegen::CompileResult fake_result(const std::string& cubin, size_t ptx_bytes = 10) {
  codegen::CompileResult r;
  r.ok = true;
  r.arch = "sm_90";
  r.cubin = cubin;
  r.ptx = std::string(ptx_bytes, 'p');
  r.log = "ptxas info : Used 40 registers";
  r.compile_ms = 12.5;
  r.registers = 40, r.spill_bytes = 0, r.shared_bytes = 1024, r.stack_bytes = 8;
  return r;
}

void sql(const std::string& path, const std::string& statement) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, statement.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace

TEST_CASE("compile cache: a stored compile comes back whole; failures are not stored", "[cache]") {
  test::TempDir td;
  const std::string path = td.file("sub/compiled.db");  // its folder is made
  {
    cache::CompileCache cc(path);
    REQUIRE(cc.enabled());
    CHECK(!cc.get("k1"));
    cc.put("k1", fake_result(std::string("\x7f" "ELF\0\1", 6)));
    auto failed = fake_result("x");
    failed.ok = false;
    cc.put("k2", failed);
    CHECK(cc.rows() == 1);
  }
  cache::CompileCache again(path);  // another run
  const auto r = again.get("k1");
  REQUIRE(r);
  CHECK(r->ok);
  CHECK(r->cubin == std::string("\x7f" "ELF\0\1", 6));
  CHECK(r->ptx == std::string(10, 'p'));
  CHECK(r->log == "ptxas info : Used 40 registers");
  CHECK(r->arch == "sm_90");
  CHECK(r->compile_ms == 12.5);
  CHECK((r->registers == 40 && r->spill_bytes == 0 && r->shared_bytes == 1024 && r->stack_bytes == 8));
  CHECK(!again.get("k2"));
  CHECK(again.hits() == 1);
}

TEST_CASE("compile cache: a damaged row is a miss and goes; a foreign file or no path turns it off", "[cache]") {
  test::TempDir td;
  const std::string path = td.file("compiled.db");
  {
    cache::CompileCache cc(path);
    cc.put("k", fake_result("cubin bytes"));
  }
  sql(path, "UPDATE compiled SET cubin = X'00'");
  {
    cache::CompileCache cc(path);
    CHECK(!cc.get("k"));
    CHECK(cc.rows() == 0);
  }
  std::ofstream(td.file("text.db")) << "not a database, but long enough to be read as one's header............\n";
  cache::CompileCache foreign(td.file("text.db"));
  CHECK(!foreign.enabled());
  CHECK_THAT(foreign.why(), Catch::Contains(td.file("text.db")));
  CHECK(!foreign.get("k"));
  foreign.put("k", fake_result("c"));  // nothing happens

  sql(path, "PRAGMA user_version = 7");  // a later format
  cache::CompileCache later(path);
  CHECK(!later.enabled());
  CHECK_THAT(later.why(), Catch::Contains("format 7"));

  cache::CompileCache none("");
  CHECK(!none.enabled());
  setenv("QJIT_COMPILE_CACHE", "", 1);
  CHECK(cache::CompileCache::default_path().empty());
  setenv("QJIT_COMPILE_CACHE", path.c_str(), 1);
  CHECK(cache::CompileCache::default_path() == path);
  unsetenv("QJIT_COMPILE_CACHE");
  CHECK_THAT(cache::CompileCache::default_path(), Catch::EndsWith("/compiled.db"));
}

TEST_CASE("compile cache: over the cap, the least recently used rows go", "[cache]") {
  test::TempDir td;
  // Rows of about 1 KB against a cap of 8 KB: it is checked every 16 writes and trimmed to 90%.
  cache::CompileCache cc(td.file("compiled.db"), 8 * 1024);
  for (int i = 0; i < 15; ++i) {
    cc.put("k" + std::to_string(i), fake_result("c" + std::to_string(i), 1000));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // distinct last_used times
  }
  CHECK(cc.rows() == 15);
  REQUIRE(cc.get("k0"));  // used again: now the most recent
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  cc.put("k15", fake_result("c15", 1000));  // the 16th write trims
  CHECK(cc.rows() == 7);                     // 7 rows of ~1 KB fill at most 90% of 8 KB
  CHECK(cc.get("k0"));
  CHECK(cc.get("k15"));
  CHECK(!cc.get("k1"));
  CHECK(cc.get("k14"));
}

TEST_CASE("compile cache: two threads share one cache", "[cache]") {
  test::TempDir td;
  cache::CompileCache cc(td.file("compiled.db"));
  auto work = [&](int t) {
    for (int i = 0; i < 40; ++i) {
      const std::string key = std::to_string(t) + "/" + std::to_string(i);
      cc.put(key, fake_result(key));
      const auto r = cc.get(key);
      CHECK((r && r->cubin == key));
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join(), b.join();
  CHECK(cc.rows() == 80);
  CHECK(cc.hits() == 80);
}

TEST_CASE("cached_compile: a later run compiles nothing it compiled before, headers aside", "[cache][tuner]") {
  test::TempDir td;
  // fp_lut's blocks_per_sm changes only the header comment (test_compile_queue.cpp).
  const auto spec = codegen::parse_spec("fp_lut", "n=1048576,fn=silu");
  std::vector<codegen::GeneratedSource> sources;
  for (const auto& c : codegen::find_op("fp_lut").tunable_space(spec))
    sources.push_back(codegen::generate_source(spec, c));
  std::atomic<int> compiled{0};
  const tuner::CompileFn fake = [&](const codegen::GeneratedSource& src, const std::string& arch) {
    ++compiled;
    return fake_result(tuner::compile_key(src, arch));
  };
  const auto run = [&](const std::string& arch) {
    cache::CompileCache cc(td.file("compiled.db"));
    tuner::CompileQueue queue(arch, 2, tuner::cached_compile(cc, fake));
    for (size_t i = 0; i < sources.size(); ++i) queue.add(i, sources[i]);
    while (const auto id = queue.next()) CHECK(queue.result(*id).cubin == tuner::compile_key(sources[*id], arch));
    return cc.hits();
  };
  CHECK(run("sm_90") == 0);
  const int first = compiled;
  CHECK(first > 1);
  CHECK(run("sm_90") == first);  // every distinct source from the cache
  CHECK(compiled == first);
  CHECK(run("sm_80") == 0);  // another arch compiles again
  CHECK(compiled == 2 * first);
  // The key holds this build's NVRTC, options and headers besides the source.
  CHECK(cache::compile_cache_key("a") != cache::compile_cache_key("b"));
  CHECK(cache::compile_cache_key("a").size() == 64);
}

TEST_CASE("cached_compile: an NVRTC result read back equals the compile", "[cache][nvrtc]") {
  test::TempDir td;
  const auto spec = codegen::parse_spec("fp_lut", "n=4096,fn=gelu");
  const auto src = codegen::generate_source(spec, codegen::find_op("fp_lut").default_config(spec));
  cache::CompileCache cc(td.file("compiled.db"));
  const auto compile = tuner::cached_compile(cc);
  const auto fresh = compile(src, "sm_90");
  REQUIRE(fresh.ok);
  const auto kept = compile(src, "sm_90");
  CHECK(cc.hits() == 1);
  CHECK(kept.cubin == fresh.cubin);
  CHECK(kept.ptx == fresh.ptx);
  CHECK(kept.log == fresh.log);
  CHECK((kept.registers == fresh.registers && kept.spill_bytes == fresh.spill_bytes &&
         kept.shared_bytes == fresh.shared_bytes && kept.stack_bytes == fresh.stack_bytes));
}
