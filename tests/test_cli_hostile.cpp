// The qjit command against hostile input: damaged cache files, deep or
// oversized JSON, integers past their type, folders where files belong, read-
// only caches, killed runs. Each case must give a clear message naming the
// value (exit 2 for a bad argument, 1 for a cache it cannot use), never a
// crash or an "internal error", and lose nothing else.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/record.h"
#include "cache/store.h"
#include "codegen/registry.h"
#include "codegen/spec.h"
#include "tests/helpers.h"

using qjit::test::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// qjit with the GPU hidden (as in test_cli.cpp) and optional extra environment.
qjit::test::CommandResult qjit_cmd(const std::string& args, const std::string& cache, const std::string& env = "") {
  return qjit::test::run_qjit_env("CUDA_VISIBLE_DEVICES= " + env, args, cache);
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::string describe(const qjit::test::CommandResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out.substr(0, 2000) + "\n--- stderr ---\n" +
         r.err.substr(0, 2000);
}

void sql(const std::string& path, const std::string& statement) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const int rc = sqlite3_exec(db, statement.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

// A cache holding compiled (untimed) kernels of fused_ffn d=256,h=64 for m = 1 and 2.
std::vector<std::string> fill_cache(const std::string& path) {
  qjit::cache::Store store(path);
  std::vector<std::string> keys;
  for (int m : {1, 2}) {
    const auto spec = qjit::codegen::parse_spec("fused_ffn", "d=256,h=64,m=" + std::to_string(m));
    qjit::cache::Fingerprint fp;
    fp.op = spec.op;
    fp.spec_json = spec.canonical_json();
    fp.device.name = "test GPU";
    fp.device.compute_capability = "9.0";
    fp.codegen_version = 2;
    const auto rec = qjit::cache::build_record(fp, spec, qjit::codegen::find_op("fused_ffn").default_config(spec),
                                               "sm_90", true);
    store.put(rec);
    keys.push_back(rec.key());
  }
  return keys;
}

}  // namespace

TEST_CASE("hostile: bad values anywhere are named, with exit 2", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  const std::string deep_config = std::string(60000, '[') + std::string(60000, ']');
  const std::string dir = td.path.string();
  struct Case {
    std::string args, needle;
  };
  std::vector<Case> cases = {
      {"source --op fused_ffn --shape d=256,h=64 --config '" + deep_config + "'", "nests deeper than 32"},
      {"source --op fused_ffn --shape d=256,h=64 --ptx --arch sm_9999999999", "sm_9999999999"},
      {"tune --op fused_ffn --shape d=256,h=64 --arch sm_99999999999999999999", "sm_99999999999999999999"},
      {"tune --op fused_ffn --shape d=256,h=64 --budget 1e30", "1e30"},
      {"tune --op fused_ffn --shape d=256,h=64 --budget inf", "'inf'"},
      {"tune --op fused_ffn --shape d=256,h=64 --budget nan", "'nan'"},
      {"tune --op fused_ffn --shape d=256,h=64 --budget -3s", "-3s"},
      {"import '" + dir + "'", "is a folder"},
      {"lut report --table '" + dir + "'", "is a folder"},
      {"repack --from awq --shape k=64,n=16,g=32 --qweight '' --qzeros z --out-qweight o --out-zeros oz",
       "--qweight is an empty path"},
      {"tune --op fp_lut --shape fn=silu,n=9223372036854775808", "n=9223372036854775808"},
  };
  // every integer key of every op's default config, pushed past 32 bits
  for (const auto& [op, shape] : std::vector<std::pair<std::string, std::string>>{
           {"fused_ffn", "d=256,h=64"},
           {"fused_ffn", "d=256,h=64,m=4"},
           {"fused_ffn", "d=256,h=64,weights=native"},
           {"fp_lut", "fn=silu,n=1048576"},
           {"awq_dequant", "k=256,n=256"},
           {"wq_gemm", "k=4096,n=4096,m=1"},
           {"wq_gemm", "k=4096,n=4096,m=256"}}) {
    const auto spec = qjit::codegen::parse_spec(op, shape);
    for (const json& config : qjit::codegen::find_op(op).tunable_space(spec)) {
      for (auto& [key, value] : config.items()) {
        if (!value.is_number_integer()) continue;
        json wrapped = config;
        wrapped[key] = 4294967296ull + value.get<int64_t>();  // the same value modulo 2^32
        cases.push_back({"source --op " + op + " --shape " + shape + " --config '" + wrapped.dump() + "'",
                         "'" + key + "' = " + wrapped[key].dump() + " is out of range"});
      }
      break;  // one config per spec: each key is the same code path in every config
    }
  }
  for (const auto& c : cases) {
    auto r = qjit_cmd(c.args, cache);
    INFO("qjit " << c.args.substr(0, 300) << "\n" << describe(r));
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, c.needle));
    CHECK_FALSE(contains(r.err, "internal error"));
    CHECK(r.err.size() < 2000);  // values are quoted by excerpt, never whole
  }
}

TEST_CASE("hostile: import refuses deep, wrapped and overlong values and stores nothing", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  const auto spec = qjit::codegen::parse_spec("fp_lut", "fn=silu,n=1048576");
  json config = qjit::codegen::find_op("fp_lut").default_config(spec);
  const json record = {{"format", "qjit-record-v1"}, {"spec", json::parse(spec.canonical_json())}, {"config", config}};
  auto line_with = [&](const std::string& key, const json& value) {
    json r = record;
    r[key] = value;
    return r.dump();
  };
  json wrapped = config;
  wrapped["threads"] = 4294967808ull;
  json huge_n = json::parse(spec.canonical_json());
  huge_n["n"] = 9223372036854775808ull;
  const std::vector<std::pair<std::string, std::string>> lines = {
      {std::string(80000, '[') + std::string(80000, ']'), "nests deeper than 32"},
      {"{\"format\":\"qjit-record-v1\",\"config\":" + std::string(80000, '[') + "}", "nests deeper than 32"},
      {line_with("config", wrapped), "'threads' = 4294967808 is out of range"},
      {line_with("spec", huge_n), "n=9223372036854775808"},
  };
  for (const auto& [line, needle] : lines) {
    const std::string file = td.file("in.jsonl");
    std::ofstream(file) << record.dump() << "\n" << line << "\n";
    auto r = qjit_cmd("import '" + file + "'", cache);
    INFO(needle << "\n" << describe(r));
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, needle));
    CHECK(contains(r.err, file + ":2"));
    CHECK(r.err.size() < 2000);
    qjit::cache::Store store(cache);
    CHECK(store.all_imports().empty());
  }
}

TEST_CASE("hostile: a damaged cache row is removed; every other row is listed, shown and exported", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  const auto keys = fill_cache(cache);
  sql(cache, "UPDATE kernels SET config_json = '{\"warps\": ' WHERE key = '" + keys[0] + "'");
  auto l = qjit_cmd("list --json", cache);
  INFO(describe(l));
  REQUIRE(l.exit_code == 0);
  const json rows = json::parse(l.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].at("key") == keys[1]);
  CHECK(contains(l.err, "cache row " + keys[0].substr(0, 12) + " is damaged"));
  CHECK(contains(l.err, "removed"));

  sql(cache, "UPDATE kernels SET spec_json = 'garbage' WHERE key = '" + keys[1] + "'");
  fill_cache(cache);  // both rows back, then one damaged again
  sql(cache, "UPDATE kernels SET config_json = '[[[' WHERE key = '" + keys[1] + "'");
  for (const std::string cmd : {"show " + keys[0].substr(0, 12), std::string("export"),
                                std::string("source --op fused_ffn --shape d=256,h=64 --best")}) {
    auto r = qjit_cmd(cmd, cache);
    INFO(cmd << "\n" << describe(r));
    CHECK(r.exit_code == 0);
    CHECK_FALSE(contains(r.err, "internal error"));
  }
  auto gone = qjit_cmd("show " + keys[1].substr(0, 12), cache);
  CHECK(gone.exit_code == 4);  // removed: nothing cached matches
}

TEST_CASE("hostile: a read-only cache is listed, shown, exported and read; writes say read-only", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  const auto keys = fill_cache(cache);
  TempDir elsewhere;  // a record to import, readable by anyone
  const auto spec = qjit::codegen::parse_spec("fused_ffn", "d=256,h=64");
  const std::string record = elsewhere.file("record.jsonl");
  std::ofstream(record) << json{{"format", "qjit-record-v1"},
                                {"spec", json::parse(spec.canonical_json())},
                                {"config", qjit::codegen::find_op("fused_ffn").default_config(spec)}}
                               .dump()
                        << "\n";
  auto check_reads = [&](const std::function<qjit::test::CommandResult(const std::string&)>& run) {
    for (const std::string cmd : {std::string("list"), "show " + keys[0].substr(0, 12), std::string("export"),
                                  std::string("source --op fused_ffn --shape d=256,h=64 --best")}) {
      auto r = run(cmd);
      INFO(cmd << "\n" << describe(r));
      CHECK(r.exit_code == 0);
    }
    auto t = run("import '" + record + "'");
    INFO(describe(t));
    CHECK(t.exit_code == 1);
    CHECK(contains(t.err, "read-only"));
  };
  check_reads([&](const std::string& cmd) { return qjit_cmd(cmd, cache, "QJIT_CACHE_READ_ONLY=1"); });

  // Permissions: as another user when running as root (root ignores them).
  fs::permissions(cache, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(td.path, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                               fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  std::string as_user;
  if (geteuid() == 0) {
    as_user = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
    if (qjit::test::run_command(as_user + "'" + qjit::test::qjit_binary() + "' --version").exit_code != 0) {
      WARN("cannot run qjit as user 65534 here (setpriv missing or the binary not readable): permissions not tested");
      fs::permissions(td.path, fs::perms::owner_all);
      return;
    }
  }
  check_reads([&](const std::string& cmd) {
    return qjit::test::run_command("CUDA_VISIBLE_DEVICES= QJIT_CACHE='" + cache + "' " + as_user + "'" +
                                   qjit::test::qjit_binary() + "' " + cmd);
  });
  fs::permissions(td.path, fs::perms::owner_all);
}

TEST_CASE("hostile: a killed repack leaves no temporary and no partial output", "[cli]") {
  TempDir td;
  const int64_t k = 4096, n = 4096, g = 128;
  {
    std::mt19937 rng(7);
    std::ofstream qw(td.file("qweight.bin"), std::ios::binary), qz(td.file("qzeros.bin"), std::ios::binary);
    for (int64_t i = 0; i < k * n / 8 * 4; ++i) qw.put(static_cast<char>(rng()));
    for (int64_t i = 0; i < k / g * n / 8 * 4; ++i) qz.put(static_cast<char>(rng()));
  }
  // a leftover of a process that no longer runs (pids stop below 2^22 on Linux)
  std::ofstream(td.file("out.q.tmp.4194999")) << "stale";
  const std::string args = "repack --from awq --shape k=4096,n=4096,g=128 --qweight '" + td.file("qweight.bin") +
                           "' --qzeros '" + td.file("qzeros.bin") + "' --out-qweight '" + td.file("out.q") +
                           "' --out-zeros '" + td.file("out.z") + "'";
  auto done = qjit_cmd(args, td.file("unused.db"));
  INFO(describe(done));
  REQUIRE(done.exit_code == 0);
  const auto q_size = fs::file_size(td.file("out.q")), z_size = fs::file_size(td.file("out.z"));
  CHECK_FALSE(fs::exists(td.file("out.q.tmp.4194999")));
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < 8; ++i) {
    fs::remove(td.file("out.q"));
    fs::remove(td.file("out.z"));
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const std::string cmd = "CUDA_VISIBLE_DEVICES= exec '" + qjit::test::qjit_binary() + "' " + args + " >/dev/null";
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400000));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    for (const auto& e : fs::directory_iterator(td.path))
      CHECK_FALSE(contains(e.path().filename().string(), ".tmp."));
    // an output is either absent or whole
    if (fs::exists(td.file("out.q"))) CHECK(fs::file_size(td.file("out.q")) == q_size);
    if (fs::exists(td.file("out.z"))) CHECK(fs::file_size(td.file("out.z")) == z_size);
  }
}
