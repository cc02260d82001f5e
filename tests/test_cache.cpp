// Tests for cache/: SHA-256, fingerprints and the SQLite store, including
// corruption, foreign files, migrations and two processes writing at once.
#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "cache/fingerprint.h"
#include "cache/sha256.h"
#include "cache/store.h"
#include "codegen/error.h"

namespace fs = std::filesystem;
using namespace qjit::cache;

namespace {

// A fresh folder under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path = fs::temp_directory_path() /
           ("qjit_test_cache_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" +
            std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

Fingerprint sample_fp() {
  Fingerprint fp;
  fp.op = "fused_ffn";
  fp.spec_json = R"({"dtype":"f16","m":128})";
  fp.device = {"NVIDIA H100 80GB HBM3", "9.0", 132, 13000};
  fp.nvrtc_version = "13.0";
  fp.templates_hash = std::string(64, 'a');
  fp.qjit_version = "0.1.0";
  fp.codegen_version = 3;
  return fp;
}

KernelRecord sample_record(const std::string& tag = "x") {
  KernelRecord r;
  r.fp = sample_fp();
  r.fp.spec_json = R"({"tag":")" + tag + R"("})";
  r.config = {{"block", 256}, {"vec", 4}};
  r.tuned = true;
  r.kernel_name = "qjit_fused_ffn_" + tag;
  r.cubin = std::string("\x7f" "ELF\0\x01\x02", 7) + "cubin-" + tag;
  r.ptx = ".version 8.0 // " + tag;
  r.source = "__global__ void k() {} // " + tag;
  r.compile_log = "no warnings";
  r.registers = 40;
  r.shared_bytes = 4096;
  r.spill_bytes = 0;
  r.median_us = 12.5;
  r.gbps = 2800.25;
  r.pct_copy_bw = 87.5;
  r.verify_error = 1e-3;
  return r;
}

TrialRecord trial(const std::string& key, int block, TrialStatus st, double us) {
  TrialRecord t;
  t.key = key;
  t.config = {{"block", block}};
  t.status = st;
  t.median_us = us;
  t.gbps = us > 0 ? 1000.0 / us : 0;
  t.verify_error = 0.5;
  t.compile_ms = 100;
  t.registers = 32;
  t.spill_bytes = 8;
  t.message = st == TrialStatus::ok ? "" : "failed: " + to_string(st);
  return t;
}

// Direct SQL on a cache file, bypassing the Store (to corrupt or inspect it).
void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  INFO(msg);
  REQUIRE(rc == SQLITE_OK);
}

std::string raw_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(s) == SQLITE_ROW);
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  std::string out = p ? p : "";
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

int64_t raw_count(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(s) == SQLITE_ROW);
  int64_t n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return n;
}

// Runs f and returns the qjit::Error it throws (fails the test if it does not).
template <class F>
qjit::Error expect_error(F&& f) {
  try {
    f();
  } catch (const qjit::Error& e) {
    return e;
  }
  FAIL("expected a qjit::Error");
  throw qjit::Error("test", "unreachable");
}

}  // namespace

TEST_CASE("sha256 matches the FIPS 180-4 examples", "[cache]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 pads correctly around block boundaries", "[cache]") {
  // 55 bytes: padding fits in one block; 56: it spills into a second; 63/64: edges.
  CHECK(sha256_hex(std::string(55, 'a')) ==
        "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  CHECK(sha256_hex(std::string(56, 'a')) ==
        "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  CHECK(sha256_hex(std::string(63, 'a')) ==
        "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
  CHECK(sha256_hex(std::string(64, 'a')) ==
        "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  // The pointer overload hashes the same bytes, NULs included.
  const char bytes[] = {'a', '\0', 'b'};
  CHECK(sha256_hex(bytes, 3) == sha256_hex(std::string_view(bytes, 3)));
  CHECK(sha256_hex(bytes, 3) != sha256_hex("a"));
}

TEST_CASE("fingerprint key is stable and changes with every field", "[cache]") {
  const Fingerprint base = sample_fp();
  const std::string key = base.key();
  CHECK(key.size() == 64);
  CHECK(sample_fp().key() == key);  // equal inputs, equal keys
  CHECK(Fingerprint::from_json(base.to_json()).key() == key);
  CHECK(base.to_json().at("device").is_object());

  std::vector<std::pair<std::string, std::function<void(Fingerprint&)>>> edits = {
      {"op", [](Fingerprint& f) { f.op = "softmax"; }},
      {"spec_json", [](Fingerprint& f) { f.spec_json = R"({"dtype":"f16","m":256})"; }},
      {"device.name", [](Fingerprint& f) { f.device.name = "NVIDIA H200"; }},
      {"device.compute_capability", [](Fingerprint& f) { f.device.compute_capability = "9.1"; }},
      {"device.sm_count", [](Fingerprint& f) { f.device.sm_count = 114; }},
      {"device.driver_version", [](Fingerprint& f) { f.device.driver_version = 12080; }},
      {"nvrtc_version", [](Fingerprint& f) { f.nvrtc_version = "12.8"; }},
      {"templates_hash", [](Fingerprint& f) { f.templates_hash = std::string(64, 'b'); }},
      {"qjit_version", [](Fingerprint& f) { f.qjit_version = "0.2.0"; }},
      {"codegen_version", [](Fingerprint& f) { f.codegen_version = 4; }},
  };
  std::set<std::string> seen = {key};
  for (const auto& [field, edit] : edits) {
    Fingerprint f = base;
    edit(f);
    INFO("field " << field);
    CHECK(f.key() != key);
    CHECK(seen.insert(f.key()).second);  // distinct from every other edit too
    CHECK(Fingerprint::from_json(f.to_json()).key() == f.key());
  }
}

TEST_CASE("malformed fingerprint JSON is a qjit::Error", "[cache]") {
  auto j = sample_fp().to_json();
  j.erase("op");
  auto e = expect_error([&] { Fingerprint::from_json(j); });
  CHECK(e.stage() == "cache");
}

TEST_CASE("default_path honours QJIT_CACHE, else HOME", "[cache]") {
  const char* old_cache = std::getenv("QJIT_CACHE");
  const char* old_home = std::getenv("HOME");
  std::string saved_cache = old_cache ? old_cache : "", saved_home = old_home ? old_home : "";

  setenv("QJIT_CACHE", "/some/where/k.db", 1);
  CHECK(Store::default_path() == "/some/where/k.db");
  setenv("QJIT_CACHE", "", 1);
  setenv("HOME", "/home/tester", 1);
  CHECK(Store::default_path() == "/home/tester/.cache/qjit/kernels.db");

  if (old_cache) setenv("QJIT_CACHE", saved_cache.c_str(), 1); else unsetenv("QJIT_CACHE");
  if (old_home) setenv("HOME", saved_home.c_str(), 1); else unsetenv("HOME");
}

TEST_CASE("put then lookup returns every field", "[cache]") {
  TempDir dir;
  const std::string path = dir.file("nested/folder/kernels.db");  // folders are created
  Store store(path);
  CHECK(store.path() == path);
  CHECK(store.schema_version() == 2);

  KernelRecord rec = sample_record();
  rec.fp.spec_json = R"({"dtype":"f16","m":128})";
  store.put(rec);

  auto got = store.lookup(rec.key());
  REQUIRE(got.has_value());
  CHECK(got->key() == rec.key());
  CHECK(got->fp.to_json() == rec.fp.to_json());
  CHECK(got->config == rec.config);
  CHECK(got->tuned == rec.tuned);
  CHECK(got->kernel_name == rec.kernel_name);
  CHECK(got->cubin == rec.cubin);  // embedded NUL survives
  CHECK(got->ptx == rec.ptx);
  CHECK(got->source == rec.source);
  CHECK(got->compile_log == rec.compile_log);
  CHECK(got->registers == rec.registers);
  CHECK(got->shared_bytes == rec.shared_bytes);
  CHECK(got->spill_bytes == rec.spill_bytes);
  CHECK(got->median_us == rec.median_us);
  CHECK(got->gbps == rec.gbps);
  CHECK(got->pct_copy_bw == rec.pct_copy_bw);
  CHECK(got->verify_error == rec.verify_error);
  CHECK(got->created.size() >= 20);
  CHECK(got->created.back() == 'Z');
  CHECK(got->last_used >= got->created);
  CHECK(store.corrupt_rows_removed() == 0);
  CHECK(store.file_bytes() > 0);

  // The stored checksum is the SHA-256 of the blob.
  CHECK(raw_count(path, "SELECT COUNT(*) FROM kernels WHERE cubin_sha256 = '" +
                            sha256_hex(rec.cubin) + "'") == 1);

  // Replacing keeps one row, takes the new values and keeps the creation time.
  KernelRecord again = rec;
  again.median_us = 10.0;
  again.tuned = false;
  store.put(again);
  auto got2 = store.lookup(rec.key());
  REQUIRE(got2.has_value());
  CHECK(got2->median_us == 10.0);
  CHECK_FALSE(got2->tuned);
  CHECK(got2->created == got->created);

  // Data outlives the Store object.
  Store reopened(path);
  CHECK(reopened.lookup(rec.key()).has_value());
}

TEST_CASE("list returns rows newest first, blobs only on request", "[cache]") {
  TempDir dir;
  Store store(dir.file("k.db"));
  store.put(sample_record("a"));
  store.put(sample_record("b"));
  auto rows = store.list();
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].kernel_name == "qjit_fused_ffn_b");
  CHECK(rows[1].kernel_name == "qjit_fused_ffn_a");
  CHECK(rows[0].cubin.empty());
  CHECK(rows[0].ptx.empty());
  CHECK(rows[0].source.empty());
  CHECK(rows[0].config == sample_record().config);
  auto full = store.list(true);
  REQUIRE(full.size() == 2);
  CHECK(full[0].cubin == sample_record("b").cubin);
  CHECK(full[0].source == sample_record("b").source);
}

TEST_CASE("trials upsert by config and sort ok-by-speed then failures", "[cache]") {
  TempDir dir;
  Store store(dir.file("k.db"));
  KernelRecord rec = sample_record();
  const std::string key = rec.key();

  store.put(rec, {trial(key, 64, TrialStatus::ok, 30), trial(key, 128, TrialStatus::ok, 10)});
  store.put_trials({
      trial(key, 256, TrialStatus::wrong_result, 5),
      trial(key, 512, TrialStatus::compile_error, 0),
      trial(key, 1024, TrialStatus::ok, 20),
      trial("other-key", 64, TrialStatus::ok, 1),
  });
  // Re-measuring block=64 replaces its row rather than adding one.
  store.put_trials({trial(key, 64, TrialStatus::ok, 5)});

  auto ts = store.trials(key);
  REQUIRE(ts.size() == 5);
  std::vector<std::string> order;  // "block:status", printable when the check fails
  for (const auto& t : ts)
    order.push_back(std::to_string(t.config.at("block").get<int>()) + ":" + to_string(t.status));
  std::vector<std::string> want = {"64:ok", "128:ok", "1024:ok", "512:compile_error",
                                   "256:wrong_result"};
  CHECK(order == want);
  CHECK(ts[0].median_us == 5);
  CHECK(ts[0].key == key);
  CHECK(ts[0].registers == 32);
  CHECK(ts[0].spill_bytes == 8);
  CHECK(ts[0].compile_ms == 100);
  CHECK(ts[0].verify_error == 0.5);
  CHECK_FALSE(ts[0].created.empty());
  CHECK(ts[3].message == "failed: compile_error");

  // The same config written with different key order is the same row.
  TrialRecord reordered = trial(key, 0, TrialStatus::ok, 1);
  reordered.config = nlohmann::json::parse(R"({"vec":2,"block":8})");
  store.put_trials({reordered});
  reordered.config = nlohmann::json::parse(R"({"block":8,"vec":2})");
  reordered.median_us = 2;
  store.put_trials({reordered});
  CHECK(store.trials(key).size() == 6);

  CHECK(store.trials("other-key").size() == 1);
  CHECK(store.trials("no-such-key").empty());

  // remove() takes the kernel and its trials, and nothing else.
  CHECK(store.remove(key));
  CHECK_FALSE(store.lookup(key).has_value());
  CHECK(store.trials(key).empty());
  CHECK(store.trials("other-key").size() == 1);
  CHECK_FALSE(store.remove(key));
}

TEST_CASE("trial status strings round trip", "[cache]") {
  for (auto s : {TrialStatus::ok, TrialStatus::compile_error, TrialStatus::resource_error,
                 TrialStatus::wrong_result, TrialStatus::unfinished})
    CHECK(trial_status_from_string(to_string(s)) == s);
  CHECK_THROWS_AS(trial_status_from_string("exploded"), qjit::Error);
  CHECK_THROWS_AS(trial_status_from_string("timeout"), qjit::Error);  // never produced; removed
}

TEST_CASE("a trial an older store marked unfinished as wrong_result reads back as unfinished", "[cache]") {
  TempDir dir;
  Store store(dir.file("k.db"));
  TrialRecord t;
  t.key = "k", t.config = {{"threads", 64}}, t.status = TrialStatus::wrong_result;
  t.message = "unfinished: the tuning run stopped while this candidate ran on the GPU (a fault, a hang or a kill); "
              "skipped from then on (qjit tune --retune tries it again)";
  TrialRecord wrong = t;
  wrong.config = {{"threads", 128}}, wrong.message = "3 of 96 elements off";
  store.put_trials({t, wrong});
  const auto back = store.trials("k");
  REQUIRE(back.size() == 2);
  for (const auto& b : back)
    CHECK(b.status == (b.config.at("threads") == 64 ? TrialStatus::unfinished : TrialStatus::wrong_result));
}

TEST_CASE("a different fingerprint misses", "[cache]") {
  TempDir dir;
  Store store(dir.file("k.db"));
  KernelRecord rec = sample_record();
  store.put(rec);
  Fingerprint other = rec.fp;
  other.device.driver_version += 10;  // e.g. the driver was upgraded
  CHECK(other.key() != rec.key());
  CHECK_FALSE(store.lookup(other.key()).has_value());
  CHECK(store.lookup(rec.key()).has_value());
}

TEST_CASE("a corrupt cubin is detected, removed and counted", "[cache]") {
  TempDir dir;
  const std::string path = dir.file("k.db");
  Store store(path);
  KernelRecord rec = sample_record();
  const std::string key = rec.key();
  store.put(rec, {trial(key, 64, TrialStatus::ok, 3)});

  // Flip one byte of the blob behind the store's back.
  std::string bad = rec.cubin;
  bad[3] = static_cast<char>(bad[3] ^ 0x01);
  std::string hex;
  for (unsigned char c : bad) {
    const char* d = "0123456789abcdef";
    hex += d[c >> 4];
    hex += d[c & 15];
  }
  raw_exec(path, "UPDATE kernels SET cubin = X'" + hex + "' WHERE key = '" + key + "'");

  CHECK_FALSE(store.lookup(key).has_value());
  CHECK(store.corrupt_rows_removed() == 1);
  CHECK(raw_count(path, "SELECT COUNT(*) FROM kernels") == 0);
  CHECK(store.trials(key).size() == 1);  // the leaderboard is kept for re-tuning
  CHECK_FALSE(store.lookup(key).has_value());  // a plain miss now
  CHECK(store.corrupt_rows_removed() == 1);

  // An emptied blob counts as corrupt as well.
  store.put(rec);
  raw_exec(path, "UPDATE kernels SET cubin = X'' WHERE key = '" + key + "'");
  CHECK_FALSE(store.lookup(key).has_value());
  CHECK(store.corrupt_rows_removed() == 2);
}

TEST_CASE("a file that is not a database is refused by name", "[cache]") {
  TempDir dir;
  const std::string path = dir.file("garbage.db");
  {
    std::ofstream out(path, std::ios::binary);
    std::mt19937 rng(42);
    for (int i = 0; i < 8192; ++i) out.put(static_cast<char>(rng()));
  }
  auto e = expect_error([&] { Store s(path); });
  CHECK(e.stage() == "cache");
  CHECK_THAT(e.what(), Catch::Contains(path));
  CHECK_THAT(e.what(), Catch::Contains("not a database"));
}

TEST_CASE("an unwritable location is refused by name", "[cache]") {
  TempDir dir;
  const std::string file = dir.file("plain_file");
  std::ofstream(file) << "I am a file, not a folder";
  const std::string path = file + "/x.db";
  auto e = expect_error([&] { Store s(path); });
  CHECK(e.stage() == "cache");
  CHECK_THAT(e.what(), Catch::Contains(path));

}

// A read-only cache: lookups and listing work, nothing is written, and every
// write names the file and says why.
void check_read_only(const std::string& path, const KernelRecord& rec, const std::string& reason) {
  Store s(path);
  CHECK(s.read_only());
  const auto hit = s.lookup(rec.key());
  REQUIRE(hit.has_value());
  CHECK(hit->cubin == rec.cubin);
  CHECK(hit->last_used == rec.last_used);  // not touched
  CHECK(s.list().size() == 1);
  CHECK(s.trials(rec.key()).size() == 1);
  CHECK_FALSE(s.lookup("0000").has_value());
  for (auto write : std::vector<std::function<void()>>{[&] { s.put(rec); },
                                                        [&] { s.put_trials({trial(rec.key(), 32, TrialStatus::ok, 1)}); },
                                                        [&] { s.remove(rec.key()); },
                                                        [&] { s.set_copy_bandwidth_gbps("d", 1.0); },
                                                        [&] { s.add_import({0, "fused_ffn", "{}", {}, {}}); }}) {
    auto e = expect_error(write);
    CHECK(e.stage() == "cache");
    CHECK_THAT(e.what(), Catch::Contains(path));
    CHECK_THAT(e.what(), Catch::Contains("read-only"));
    CHECK_THAT(e.what(), Catch::Contains(reason));
  }
}

TEST_CASE("a read-only cache is opened read-only: reads work, writes say why", "[cache]") {
  TempDir dir;
  const std::string path = dir.file("shared.db");
  KernelRecord rec = sample_record();
  {
    Store s(path);
    s.put(rec, {trial(rec.key(), 64, TrialStatus::ok, 3)});
    rec = *s.lookup(rec.key());
  }
  const auto before = raw_count(path, "SELECT COUNT(*) FROM kernels");

  SECTION("QJIT_CACHE_READ_ONLY=1 on a writable file") {
    setenv("QJIT_CACHE_READ_ONLY", "1", 1);
    check_read_only(path, rec, "QJIT_CACHE_READ_ONLY");
    unsetenv("QJIT_CACHE_READ_ONLY");
    CHECK(raw_count(path, "SELECT COUNT(*) FROM kernels") == before);
    CHECK_FALSE(Store(path).read_only());
  }
  SECTION("a file and folder without write permission") {
    if (geteuid() == 0) {
      WARN("running as root, which ignores permission bits: covered by the CLI test run as nobody");
      return;
    }
    fs::permissions(path, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    check_read_only(path, rec, "not writable");
    fs::permissions(dir.path, fs::perms::owner_all);
  }
  SECTION("a missing file in a read-only setting is named") {
    setenv("QJIT_CACHE_READ_ONLY", "1", 1);
    auto e = expect_error([&] { Store s(dir.file("absent.db")); });
    unsetenv("QJIT_CACHE_READ_ONLY");
    CHECK_THAT(e.what(), Catch::Contains("absent.db"));
    CHECK_THAT(e.what(), Catch::Contains("does not exist"));
  }
  SECTION("an older schema cannot be upgraded read-only") {
    const std::string old = dir.file("v0.db");
    raw_exec(old, "PRAGMA user_version = 0");
    setenv("QJIT_CACHE_READ_ONLY", "1", 1);
    auto e = expect_error([&] { Store s(old); });
    unsetenv("QJIT_CACHE_READ_ONLY");
    CHECK_THAT(e.what(), Catch::Contains("schema version 0"));
  }
}

TEST_CASE("a damaged schema version is refused by name, whatever its value", "[cache]") {
  TempDir dir;
  for (const char* v : {"-1", "-100", "-33554431", "-2147483648"}) {
    INFO(v);
    const std::string path = dir.file(std::string("neg") + v + ".db");
    { Store s(path); }
    raw_exec(path, std::string("PRAGMA user_version = ") + v);
    auto e = expect_error([&] { Store s(path); });
    CHECK(e.stage() == "cache");
    CHECK_THAT(e.what(), Catch::Contains(path));
    CHECK_THAT(e.what(), Catch::Contains(std::string("schema version is ") + v));
  }
}

TEST_CASE("a row with damaged JSON is removed and read as absent; the others stay", "[cache]") {
  TempDir dir;
  const std::string path = dir.file("k.db");
  Store store(path);
  KernelRecord good = sample_record("good"), bad = sample_record("bad");
  store.put(good, {trial(good.key(), 64, TrialStatus::ok, 3), trial(good.key(), 128, TrialStatus::ok, 4)});
  store.put(bad);
  REQUIRE(store.list().size() == 2);
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  for (const std::string& column : std::vector<std::string>{"config_json = '{\"warps\": 4'", "config_json = '" + deep + "'",
                                                             "device_name = CAST(X'C328FF' AS TEXT)",
                                    "spec_json = 'not json'", "spec_json = '[1, 2]'"}) {
    INFO(column);
    store.put(bad);
    raw_exec(path, "UPDATE kernels SET " + column + " WHERE key = '" + bad.key() + "'");
    const auto removed = store.corrupt_rows_removed();
    const auto rows = store.list();  // lists the good row, removes the bad one
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].key() == good.key());
    CHECK(store.corrupt_rows_removed() == removed + 1);
    CHECK(raw_count(path, "SELECT COUNT(*) FROM kernels WHERE key = '" + bad.key() + "'") == 0);
    // a lookup of a damaged row is a miss that removes it
    store.put(bad);
    raw_exec(path, "UPDATE kernels SET " + column + " WHERE key = '" + bad.key() + "'");
    CHECK_FALSE(store.lookup(bad.key()).has_value());
    CHECK(raw_count(path, "SELECT COUNT(*) FROM kernels WHERE key = '" + bad.key() + "'") == 0);
    CHECK(store.lookup(good.key()).has_value());
  }
  // damaged trials and imports: dropped, the rest read
  raw_exec(path, "UPDATE trials SET config_json = '{' WHERE rowid = (SELECT MIN(rowid) FROM trials)");
  CHECK(store.trials(good.key()).size() == 1);
  CHECK(raw_count(path, "SELECT COUNT(*) FROM trials") == 1);
  raw_exec(path, "UPDATE trials SET status = 'exploded'");
  CHECK(store.trials(good.key()).empty());
  store.add_import({0, "fused_ffn", "{}", {{"warps", 4}}, {{"format", "x"}}});
  store.add_import({0, "fused_ffn", "{}", {{"warps", 8}}, {{"format", "x"}}});
  raw_exec(path, "UPDATE imports SET source_record = 'nope' WHERE id = (SELECT MIN(id) FROM imports)");
  const auto imports = store.all_imports();
  REQUIRE(imports.size() == 1);
  CHECK(imports[0].config == nlohmann::json{{"warps", 8}});
  CHECK(store.imports("fused_ffn", "{}").size() == 1);
}

TEST_CASE("schema migrations and foreign databases", "[cache]") {
  TempDir dir;

  SECTION("an empty database at user_version 0 is migrated") {
    const std::string path = dir.file("v0.db");
    raw_exec(path, "PRAGMA user_version = 0");
    {
      Store s(path);
      CHECK(s.schema_version() == 2);
      s.put(sample_record());
    }
    CHECK(raw_count(path, "PRAGMA user_version") == 2);
    CHECK(raw_count(path, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                          "('kernels', 'trials', 'devices', 'imports')") == 4);
    Store again(path);  // opening a current file is a no-op
    CHECK(again.list().size() == 1);
  }

  SECTION("a version 1 file (trials without the screened column) is migrated; its rows read as before") {
    const std::string path = dir.file("v1.db");
    const KernelRecord rec = sample_record();
    {
      Store s(path);
      s.put(rec, {trial(rec.key(), 64, TrialStatus::ok, 3), trial(rec.key(), 128, TrialStatus::wrong_result, 0)});
    }
    // Back to version 1 as a qjit before the staged search wrote it.
    raw_exec(path, "ALTER TABLE trials DROP COLUMN screened; PRAGMA user_version = 1");
    SECTION("read-only, it serves lookups and trials without being changed") {
      setenv("QJIT_CACHE_READ_ONLY", "1", 1);
      {
        Store ro(path);
        unsetenv("QJIT_CACHE_READ_ONLY");
        CHECK(ro.schema_version() == 1);
        CHECK(ro.lookup(rec.key()).has_value());
        const auto t = ro.trials(rec.key());
        REQUIRE(t.size() == 2);
        CHECK_FALSE(t[0].screened);
        CHECK(t[0].status == TrialStatus::ok);
      }
      unsetenv("QJIT_CACHE_READ_ONLY");
      CHECK(raw_count(path, "PRAGMA user_version") == 1);
    }
    SECTION("writable, it is migrated and keeps every row") {
      Store s(path);
      CHECK(s.schema_version() == 2);
      CHECK(s.lookup(rec.key()).has_value());
      auto t = s.trials(rec.key());
      REQUIRE(t.size() == 2);
      CHECK_FALSE(t[0].screened);
      CHECK(t[0].median_us == 3);
      // A screened trial is stored as such, ordered after the full ok ones, and replaced by its full trial.
      TrialRecord screened = trial(rec.key(), 32, TrialStatus::ok, 1);
      screened.screened = true;
      s.put_trials({screened});
      t = s.trials(rec.key());
      REQUIRE(t.size() == 3);
      CHECK_FALSE(t[0].screened);
      CHECK(t[1].screened);
      CHECK(t[1].config == screened.config);
      screened.screened = false;
      screened.median_us = 1.5;
      s.put_trials({screened});
      t = s.trials(rec.key());
      REQUIRE(t.size() == 3);
      CHECK(t[0].config == screened.config);
      CHECK_FALSE(t[0].screened);
      CHECK(t[0].median_us == 1.5);
    }
  }

  SECTION("a newer schema is refused clearly") {
    const std::string path = dir.file("v99.db");
    raw_exec(path, "PRAGMA user_version = 99");
    auto e = expect_error([&] { Store s(path); });
    CHECK_THAT(e.what(), Catch::Contains(path));
    CHECK_THAT(e.what(), Catch::Contains("99"));
    CHECK_THAT(e.what(), Catch::Contains("newer"));
    CHECK(raw_count(path, "PRAGMA user_version") == 99);  // left untouched
  }

  SECTION("someone else's database is refused, not written into") {
    const std::string path = dir.file("theirs.db");
    raw_exec(path, "CREATE TABLE customers(id INTEGER, name TEXT)");
    auto e = expect_error([&] { Store s(path); });
    CHECK_THAT(e.what(), Catch::Contains(path));
    CHECK_THAT(e.what(), Catch::Contains("customers"));
    CHECK(raw_count(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'kernels'") == 0);
  }
}

TEST_CASE("device bandwidth and imports", "[cache]") {
  TempDir dir;
  Store store(dir.file("k.db"));

  CHECK_FALSE(store.copy_bandwidth_gbps("h100").has_value());
  store.set_copy_bandwidth_gbps("h100", 3000.5);
  store.set_copy_bandwidth_gbps("h100", 3100.25);  // re-measured: replaced
  REQUIRE(store.copy_bandwidth_gbps("h100").has_value());
  CHECK(*store.copy_bandwidth_gbps("h100") == 3100.25);

  ImportRecord a;
  a.op = "softmax";
  a.spec_json = R"({"n":1024})";
  a.config = {{"block", 128}};
  a.source_record = {{"key", "abc"}, {"op", "softmax"}};
  ImportRecord b = a;
  b.spec_json = R"({"n":2048})";
  int64_t ida = store.add_import(a);
  int64_t idb = store.add_import(b);
  CHECK(idb > ida);

  auto found = store.imports("softmax", R"({"n":1024})");
  REQUIRE(found.size() == 1);
  CHECK(found[0].id == ida);
  CHECK(found[0].op == a.op);
  CHECK(found[0].spec_json == a.spec_json);
  CHECK(found[0].config == a.config);
  CHECK(found[0].source_record == a.source_record);
  CHECK(store.all_imports().size() == 2);

  store.remove_import(ida);
  CHECK(store.imports("softmax", R"({"n":1024})").empty());
  CHECK(store.all_imports().size() == 1);
}

TEST_CASE("two threads with their own connections (a tune on two GPUs) lose nothing", "[cache]") {
  TempDir dir;
  const std::string path = dir.file("threads.db");  // not created yet: both race to create and migrate it
  constexpr int kPerThread = 150;
  std::atomic<int> failures{0};
  auto writer = [&](int id) {
    try {
      Store store(path);
      for (int i = 0; i < kPerThread; ++i) {
        KernelRecord rec = sample_record("t" + std::to_string(id) + "_" + std::to_string(i));
        TrialRecord screened = trial(rec.key(), 32, TrialStatus::ok, 1);
        screened.screened = true;
        store.put_trials({screened});  // as the screen stores them, one at a time
        store.put(rec, {trial(rec.key(), 64, TrialStatus::ok, 2)});
        (void)store.trials(rec.key());  // reads between the other's writes
      }
    } catch (const std::exception& e) {
      UNSCOPED_INFO("thread " << id << ": " << e.what());
      ++failures;
    }
  };
  std::thread a(writer, 0), b(writer, 1);
  a.join();
  b.join();
  CHECK(failures == 0);
  Store store(path);
  CHECK(store.list().size() == 2 * kPerThread);
  CHECK(raw_count(path, "SELECT COUNT(*) FROM trials") == 2 * 2 * kPerThread);
  CHECK(raw_count(path, "SELECT COUNT(*) FROM trials WHERE screened = 1") == 2 * kPerThread);
  CHECK(raw_text(path, "PRAGMA journal_mode") == "wal");
}

TEST_CASE("two processes writing one fresh file lose nothing", "[cache]") {
  TempDir dir;
  const std::string path = dir.file("shared.db");  // not created yet: both race to migrate
  constexpr int kPerChild = 200;

  auto child = [&](int id) {
    try {
      Store store(path);
      for (int i = 0; i < kPerChild; ++i) {
        KernelRecord rec = sample_record("p" + std::to_string(id) + "_" + std::to_string(i));
        const std::string key = rec.key();
        store.put(rec, {trial(key, 64, TrialStatus::ok, 2), trial(key, 128, TrialStatus::unfinished, 0)});
      }
      _exit(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", id, e.what());
      _exit(1);
    } catch (...) {
      _exit(2);
    }
  };

  std::vector<pid_t> pids;
  for (int id = 0; id < 2; ++id) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) child(id);  // never returns
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  Store store(path);
  CHECK(store.list().size() == 2 * kPerChild);
  CHECK(raw_count(path, "SELECT COUNT(*) FROM trials") == 2 * 2 * kPerChild);
  for (int id = 0; id < 2; ++id)
    for (int i = 0; i < kPerChild; ++i) {
      const std::string key =
          sample_record("p" + std::to_string(id) + "_" + std::to_string(i)).key();
      INFO("child " << id << " row " << i);
      REQUIRE(store.lookup(key).has_value());
      REQUIRE(store.trials(key).size() == 2);
    }
  CHECK(store.corrupt_rows_removed() == 0);
}
