// Shipped tuning records (tuner/shipped.h): reading, picking this GPU's, the
// repository's own files, and the CLI paths that need no GPU.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include "cache/fingerprint.h"
#include "codegen/registry.h"
#include "codegen/spec.h"
#include "helpers.h"
#include "runtime/kernel_cache.h"
#include "tuner/shipped.h"

using nlohmann::json;
using qjit::codegen::parse_spec;

namespace {

// A `qjit export` line for `spec` with its default config, tuned on a GPU called `gpu`, with this
// build's templates unless `templates_hash` names others.
std::string record(const std::string& op, const std::string& shape, const std::string& gpu, const std::string& cc,
                   const std::string& templates_hash = "") {
  const auto spec = parse_spec(op, shape);
  qjit::cache::Fingerprint fp;
  fp.op = op;
  fp.spec_json = spec.canonical_json();
  fp.device = {gpu, cc, 132, 13000};
  fp.templates_hash = templates_hash.empty() ? qjit::runtime::templates_hash(op) : templates_hash;
  const json j = {{"format", "qjit-record-v1"},
                  {"fingerprint", fp.to_json()},
                  {"spec", json::parse(spec.canonical_json())},
                  {"config", qjit::codegen::find_op(op).default_config(spec)},
                  {"tuned", true},
                  {"median_us", 10.0}};
  return j.dump();
}

}  // namespace

TEST_CASE("shipped records: every file of the folder, bad lines named, this GPU's picked", "[shipped]") {
  qjit::test::TempDir td;
  std::ofstream(td.file("h100.jsonl")) << record("fused_ffn", "d=256,h=64", "NVIDIA H100 80GB HBM3", "9.0") << "\n\n"
                                       << record("fp_lut", "n=4096,fn=silu", "NVIDIA H100 80GB HBM3", "9.0") << "\n"
                                       << "{\"format\":\"qjit-record-v1\", oops\n";
  const char* illegal = R"({"format":"qjit-record-v1","spec":{"op":"fused_ffn","d":256,"h":64},"config":{}})";
  std::ofstream(td.file("h200.jsonl")) << record("fused_ffn", "d=256,h=64", "NVIDIA H200", "9.0") << "\n"
                                       << illegal << "\n";
  // models.jsonl is the manifest of shapes, and other extensions are not records.
  std::ofstream(td.file("models.jsonl")) << R"({"op": "fused_ffn", "shape": "d=256,h=64"})" << "\n";
  std::ofstream(td.file("notes.txt")) << "not a record\n";

  const auto set = qjit::tuner::read_shipped(td.path.string());
  REQUIRE(set.records.size() == 3);
  CHECK(set.records[0].where == "h100.jsonl:1");
  CHECK(set.records[1].where == "h100.jsonl:3");  // the blank line counts
  CHECK(set.records[2].where == "h200.jsonl:1");
  REQUIRE(set.problems.size() == 2);
  CHECK_THAT(set.problems[0], Catch::StartsWith("h100.jsonl:4: "));
  CHECK_THAT(set.problems[1], Catch::StartsWith("h200.jsonl:2: "));  // an illegal config ({} lacks every tunable)

  const auto h100 = qjit::tuner::shipped_for(set, {"NVIDIA H100 80GB HBM3", "9.0", 114, 12080});
  REQUIRE(h100.size() == 2);  // the SM count and driver may differ
  CHECK(h100[1].line.spec.op == "fp_lut");
  CHECK(qjit::tuner::shipped_for(set, {"NVIDIA H100 80GB HBM3", "8.0", 132, 13000}).empty());
  CHECK(qjit::tuner::shipped_for(set, {"NVIDIA H100 PCIe", "9.0", 114, 13000}).empty());
  CHECK(qjit::tuner::read_shipped("").records.empty());
  CHECK(qjit::tuner::read_shipped(td.file("missing")).problems.size() == 1);
}

TEST_CASE("shipped records: those tuned with other templates are named stale, the others not", "[shipped]") {
  qjit::test::TempDir td;
  std::ofstream(td.file("h100.jsonl")) << record("fp_lut", "n=4096,fn=silu", "NVIDIA H100 80GB HBM3", "9.0") << "\n"
                                       << record("fused_ffn", "d=256,h=64", "NVIDIA H100 80GB HBM3", "9.0",
                                                 std::string(64, '0'))
                                       << "\n";
  const auto set = qjit::tuner::read_shipped(td.path.string());
  REQUIRE(set.records.size() == 2);
  CHECK(set.records[0].templates_hash == qjit::runtime::templates_hash("fp_lut"));
  CHECK(qjit::tuner::stale_records(set) ==
        std::vector<std::string>{"h100.jsonl:2: fused_ffn's templates changed since it was tuned"});
}

TEST_CASE("shipped records: QJIT_SHIPPED names the folder; set but empty means none", "[shipped]") {
  qjit::test::TempDir td;
  setenv("QJIT_SHIPPED", td.path.c_str(), 1);
  CHECK(qjit::tuner::shipped_dir() == td.path.string());
  setenv("QJIT_SHIPPED", "", 1);
  CHECK(qjit::tuner::shipped_dir().empty());
  setenv("QJIT_SHIPPED", td.file("missing").c_str(), 1);
  CHECK(qjit::tuner::shipped_dir().empty());
  unsetenv("QJIT_SHIPPED");
}

TEST_CASE("shipped records: the repository's files are all usable and the model shapes parse", "[shipped]") {
  const std::string dir = QJIT_TUNED_DIR;
  REQUIRE(std::filesystem::is_directory(dir));
  // A record whose config the op's space no longer accepts (a changed template) shows here.
  const auto set = qjit::tuner::read_shipped(dir);
  for (const auto& p : set.problems) FAIL_CHECK(p);
  // A record tuned before its op's templates changed must be made again before it ships (tests/gpu_ship.sh).
  for (const auto& p : qjit::tuner::stale_records(set)) FAIL_CHECK(p);
  for (const auto& r : set.records) {
    INFO(r.where);
    CHECK(!r.device.name.empty());
    CHECK(!r.device.compute_capability.empty());
  }
  std::ifstream models(dir + "/models.jsonl");
  int lines = 0;
  for (std::string text; std::getline(models, text);) {
    if (text.empty()) continue;
    ++lines;
    INFO(text);
    const json j = json::parse(text);
    REQUIRE(j.contains("op"));
    REQUIRE(j.contains("shape"));
    CHECK_NOTHROW(parse_spec(j["op"].get<std::string>(), j["shape"].get<std::string>()));
    CHECK(j.value("models", "") != "");  // each shape says which models it serves
  }
  CHECK(lines >= 10);
}

TEST_CASE("shipped records: import --shipped and a manifest's own m, without a GPU", "[shipped][cli]") {
  qjit::test::TempDir td;
  std::ofstream(td.file("h200.jsonl")) << record("fused_ffn", "d=256,h=64", "NVIDIA H200", "9.0") << "\n";
  const std::string env = "CUDA_VISIBLE_DEVICES= QJIT_SHIPPED='" + td.path.string() + "'";
  auto r = qjit::test::run_qjit_env(env, "import --shipped", td.file("k.db"));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, Catch::Contains("1 shipped record(s) wait in " + td.path.string()));
  r = qjit::test::run_qjit_env(env, "import --shipped x.jsonl", td.file("k.db"));
  CHECK(r.exit_code == 2);
  r = qjit::test::run_qjit_env(env, "import", td.file("k.db"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--shipped"));

  std::ofstream(td.file("m.jsonl")) << R"({"op": "fused_ffn", "shape": "d=256,h=64", "m": "1-3", "models": "x"})"
                                    << "\n" << R"({"op": "fp_lut", "shape": "n=4096,fn=silu"})" << "\n";
  r = qjit::test::run_qjit_env(env, "tune --manifest '" + td.file("m.jsonl") + "'", td.file("k.db"));
  CHECK(r.exit_code == 3);
  for (const char* m : {"m=1:", "m=2:", "m=3:"}) CHECK_THAT(r.out, Catch::Contains(std::string("h=64 ") + m));
  std::ofstream(td.file("bad.jsonl")) << R"({"op": "fused_ffn", "shape": "d=256,h=64", "m": 4})" << "\n";
  r = qjit::test::run_qjit_env(env, "tune --manifest '" + td.file("bad.jsonl") + "'", td.file("k.db"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("line 1: \"m\" must be a string"));
}
