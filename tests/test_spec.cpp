// Tests for codegen/spec.*: the key=value parser, spec validation with its
// error messages, canonical JSON (the part of the cache key that names the op)
// and the round trips between the three spellings of a spec.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/error.h"
#include "codegen/registry.h"
#include "codegen/spec.h"

using qjit::codegen::make_spec;
using qjit::codegen::OpSpec;
using qjit::codegen::parse_kv_list;
using qjit::codegen::parse_spec;
using qjit::codegen::spec_from_json;
using json = nlohmann::json;

namespace {

// Runs f, which must throw qjit::Error of `stage` whose message contains every
// one of `needles`. Returns the message for further checks.
template <class F>
std::string expect_error(F&& f, const std::string& stage, const std::vector<std::string>& needles) {
  try {
    f();
  } catch (const qjit::Error& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(e.stage() == stage);
    for (const auto& n : needles) {
      INFO("expected to find: " << n);
      CHECK(msg.find(n) != std::string::npos);
    }
    return msg;
  }
  FAIL("no qjit::Error(" << stage << ") was thrown");
  return {};
}

}  // namespace

TEST_CASE("parse_kv_list: integers, k suffix, strings, whitespace", "[spec]") {
  auto j = parse_kv_list("d=4096,h=11008,dtype=fp16");
  REQUIRE(j.size() == 3);
  CHECK(j["d"].is_number_integer());
  CHECK(j["d"].get<int64_t>() == 4096);
  CHECK(j["h"].get<int64_t>() == 11008);
  CHECK(j["dtype"].is_string());
  CHECK(j["dtype"].get<std::string>() == "fp16");

  // k / K = x1024
  j = parse_kv_list("d=4k,h=11K");
  CHECK(j["d"].get<int64_t>() == 4096);
  CHECK(j["h"].get<int64_t>() == 11 * 1024);

  // whitespace around keys, values and commas is ignored
  j = parse_kv_list("  d = 256 ,\th=64\t, dtype = bf16 ");
  REQUIRE(j.size() == 3);
  CHECK(j["d"].get<int64_t>() == 256);
  CHECK(j["h"].get<int64_t>() == 64);
  CHECK(j["dtype"].get<std::string>() == "bf16");

  // numbers that are not plain integers stay strings, for make_spec to reject by name
  j = parse_kv_list("a=1.5,b=0x10,c=k,e=-,f=12a,g=-7,z=007");
  CHECK(j["a"] == "1.5");
  CHECK(j["b"] == "0x10");
  CHECK(j["c"] == "k");
  CHECK(j["e"] == "-");
  CHECK(j["f"] == "12a");
  CHECK(j["g"].is_number_integer());
  CHECK(j["g"].get<int64_t>() == -7);
  CHECK(j["z"].get<int64_t>() == 7);

  // the empty list is an empty object
  CHECK(parse_kv_list("") == json::object());
}

TEST_CASE("parse_kv_list: random lists round trip", "[spec]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (int iter = 0; iter < 200; ++iter) {
    json expect = json::object();
    std::vector<std::string> pieces;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      std::string key = "k" + std::to_string(i) + std::string(1, static_cast<char>('a' + rng() % 26));
      const int kind = static_cast<int>(rng() % 3);
      std::string text;
      if (kind == 0) {
        int64_t v = static_cast<int64_t>(rng() % 2000000) - 1000000;
        expect[key] = v;
        text = std::to_string(v);
      } else if (kind == 1) {
        int64_t v = rng() % 5000;
        expect[key] = v * 1024;
        text = std::to_string(v) + (rng() % 2 ? "k" : "K");
      } else {
        std::string s = "v" + std::to_string(rng() % 100) + "x";
        expect[key] = s;
        text = s;
      }
      std::string sp1(rng() % 3, ' '), sp2(rng() % 3, ' ');
      pieces.push_back(sp1 + key + sp2 + "=" + sp2 + text + sp1);
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    std::string line;
    for (auto& p : pieces) line += (line.empty() ? "" : ",") + p;
    INFO("input: " << line);
    CHECK(parse_kv_list(line) == expect);
  }
}

TEST_CASE("parse_kv_list: malformed pieces name themselves", "[spec]") {
  expect_error([] { parse_kv_list("d"); }, "spec", {"'d'"});
  expect_error([] { parse_kv_list("d=4096,h"); }, "spec", {"'h'"});
  expect_error([] { parse_kv_list("=4"); }, "spec", {"'=4'"});
  expect_error([] { parse_kv_list("d="); }, "spec", {"'d='"});
  expect_error([] { parse_kv_list("d=1, = 2"); }, "spec", {"'= 2'"});
  expect_error([] { parse_kv_list("d=1,,h=2"); }, "spec", {"empty item", "d=1,,h=2"});
  expect_error([] { parse_kv_list(",d=1"); }, "spec", {"empty item"});
  expect_error([] { parse_kv_list("d=1,h=2,d=3"); }, "spec", {"'d'", "twice"});
  // duplicates are found after trimming
  expect_error([] { parse_kv_list("d=1, d =1"); }, "spec", {"'d'", "twice"});
}

TEST_CASE("make_spec fused_ffn: defaults and canonical JSON", "[spec]") {
  const OpSpec s = make_spec("fused_ffn", {{"d", 4096}, {"h", 11008}});
  CHECK(s.op == "fused_ffn");
  CHECK(s.get_int("d") == 4096);
  CHECK(s.get_int("h") == 11008);
  CHECK(s.get_int("m") == 1);
  CHECK(s.get_str("dtype") == "fp16");
  CHECK(s.canonical_json() == R"({"act":"silu","d":4096,"dtype":"fp16","h":11008,"m":1,"op":"fused_ffn"})");
  CHECK(s.shape_string() == "act=silu,d=4096,dtype=fp16,h=11008,m=1");
  CHECK(s.label() == "fused_ffn act=silu d=4096 dtype=fp16 h=11008 m=1");

  // every spelling of the same spec gives the same canonical JSON
  const std::vector<std::string> spellings = {
      "d=4096,h=11008",           "h=11008,d=4096",         "dtype=fp16,m=1,h=11008,d=4096",
      " h = 11008 , d = 4k ",     "m=1,d=4K,h=11008,dtype=fp16",
  };
  for (const auto& sp : spellings) {
    INFO(sp);
    CHECK(parse_spec("fused_ffn", sp).canonical_json() == s.canonical_json());
  }
}

TEST_CASE("make_spec fused_ffn: random specs are canonical regardless of key order", "[spec]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const std::vector<std::string> dtypes = {"fp16", "bf16", "fp32", "mixed"};
  for (int iter = 0; iter < 300; ++iter) {
    const int64_t d = 1 + rng() % (1 << 20), h = 1 + rng() % (1 << 20), m = 1 + rng() % 8;
    const std::string dt = dtypes[rng() % 4];
    std::vector<std::string> pieces = {"d=" + std::to_string(d), "h=" + std::to_string(h)};
    const bool give_m = rng() % 2 || m != 1, give_dt = rng() % 2 || dt != "fp16";
    if (give_m) pieces.push_back("m=" + std::to_string(m));
    if (give_dt) pieces.push_back("dtype=" + dt);
    std::shuffle(pieces.begin(), pieces.end(), rng);
    std::string line;
    for (auto& p : pieces) line += (line.empty() ? "" : ",") + p;
    INFO("input: " << line);
    const OpSpec s = parse_spec("fused_ffn", line);
    const std::string expect = "{\"act\":\"silu\",\"d\":" + std::to_string(d) + ",\"dtype\":\"" + dt + "\",\"h\":" + std::to_string(h) +
                               ",\"m\":" + std::to_string(m) + ",\"op\":\"fused_ffn\"}";
    CHECK(s.canonical_json() == expect);
    // the three spellings round trip
    CHECK(spec_from_json(json::parse(s.canonical_json())).canonical_json() == expect);
    CHECK(parse_spec("fused_ffn", s.shape_string()).canonical_json() == expect);
  }
}

TEST_CASE("make_spec fused_ffn: bad values are named", "[spec]") {
  expect_error([] { make_spec("nope", {{"d", 1}, {"h", 1}}); }, "spec", {"'nope'", "fused_ffn"});
  expect_error([] { parse_spec("fused_ffn", "d=4096,h=64,q=3"); }, "spec", {"'q'", "d, h, m, dtype"});
  expect_error([] { parse_spec("fused_ffn", "d=4096,h=64,dtype=fp8"); }, "spec", {"dtype=fp8", "fp16|bf16|fp32|mixed"});
  expect_error([] { make_spec("fused_ffn", {{"d", 4096}, {"h", 64}, {"dtype", 5}}); }, "spec", {"dtype=5"});
  expect_error([] { parse_spec("fused_ffn", "d=0,h=64"); }, "spec", {"d=0"});
  expect_error([] { parse_spec("fused_ffn", "d=64,h=64,m=9"); }, "spec", {"m=9", "[1, 8]"});
  expect_error([] { parse_spec("fused_ffn", "d=64,h=64,m=0"); }, "spec", {"m=0"});
  expect_error([] { parse_spec("fused_ffn", "d=64,h=-5"); }, "spec", {"h=-5"});
  expect_error([] { parse_spec("fused_ffn", "d=abc,h=64"); }, "spec", {"d=abc"});
  expect_error([] { parse_spec("fused_ffn", "d=1.5,h=64"); }, "spec", {"d=1.5"});
  expect_error([] { make_spec("fused_ffn", {{"d", 1.5}, {"h", 64}}); }, "spec", {"d=1.5"});
  expect_error([] { make_spec("fused_ffn", {{"d", true}, {"h", 64}}); }, "spec", {"d=true"});
  expect_error([] { parse_spec("fused_ffn", "d=1048577,h=64"); }, "spec", {"d=1048577"});
  expect_error([] { parse_spec("fused_ffn", "d=9999999999999999,h=64"); }, "spec", {"d=9999999999999999"});
  expect_error([] { parse_spec("fused_ffn", "h=64"); }, "spec", {"'d'"});
  expect_error([] { make_spec("fused_ffn", json::array({1, 2})); }, "spec", {"JSON object"});
  // the upper bound itself is fine
  CHECK(parse_spec("fused_ffn", "d=1024k,h=1").get_int("d") == 1 << 20);
}

TEST_CASE("spec_from_json: round trip and malformed documents", "[spec]") {
  const OpSpec s = parse_spec("fused_ffn", "d=1000,h=64,m=3,dtype=mixed");
  const OpSpec t = spec_from_json(json::parse(s.canonical_json()));
  CHECK(t.op == s.op);
  CHECK(t.params == s.params);
  CHECK(t.canonical_json() == s.canonical_json());
  // a document with missing defaults is canonicalised
  CHECK(spec_from_json({{"op", "fused_ffn"}, {"h", 64}, {"d", 1000}}).canonical_json() ==
        R"({"act":"silu","d":1000,"dtype":"fp16","h":64,"m":1,"op":"fused_ffn"})");
  expect_error([] { spec_from_json({{"d", 1}, {"h", 1}}); }, "spec", {"\"op\""});
  expect_error([] { spec_from_json({{"op", 3}, {"d", 1}, {"h", 1}}); }, "spec", {"\"op\""});
  expect_error([] { spec_from_json(json::array()); }, "spec", {"\"op\""});
  expect_error([] { spec_from_json({{"op", "fused_ffn"}, {"d", 0}, {"h", 1}}); }, "spec", {"d=0"});
}

TEST_CASE("registry: find_op lists the known ops", "[spec]") {
  CHECK(qjit::codegen::find_op("fused_ffn").name() == "fused_ffn");
  bool found = false;
  for (auto* op : qjit::codegen::all_ops()) found |= op->name() == "fused_ffn";
  CHECK(found);
  expect_error([] { qjit::codegen::find_op("wq_gemmm"); }, "spec", {"'wq_gemmm'", "known ops"});
}
