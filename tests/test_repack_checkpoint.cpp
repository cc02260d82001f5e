// qjit repack --checkpoint: a whole AWQ or GPTQ .safetensors checkpoint made
// here (random codes packed in each format's documented order), converted in
// one run; every layer must equal what the single-layer packers give, bit
// for bit, the manifest must list each distinct wq_gemm spec once, and every
// tensor that is not part of a quantized layer must come through unchanged.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "io/tensor_file.h"
#include "tests/helpers.h"
#include "tuner/reference/awq_dequant.h"
#include "tuner/reference/wq_gemm.h"

using namespace qjit;
using namespace qjit::tuner;
namespace fs = std::filesystem;

namespace {

io::Tensor words_tensor(const std::vector<uint32_t>& w, std::vector<int64_t> shape) {
  return io::Tensor{io::DType::i32, std::move(shape), io::le32_bytes(w)};
}

std::vector<uint32_t> words_of(const io::Tensor& t) { return io::le32_words(t.bytes); }

PlainQuant random_layer(std::mt19937_64& rng, int64_t k, int64_t n, int64_t g) {
  PlainQuant p;
  p.k = k, p.n = n, p.g = g, p.bits = 4;
  p.q.resize(k * n);
  p.z.resize((k / g) * n);
  for (auto& v : p.q) v = static_cast<uint8_t>(rng() & 15);
  for (auto& v : p.z) v = static_cast<uint8_t>(rng() & 15);
  return p;
}

io::Tensor scales_tensor(std::mt19937_64& rng, int64_t rows, int64_t n) {
  io::Tensor t{io::DType::f16, {rows, n}, std::string(rows * n * 2, '\0')};
  for (auto& c : t.bytes) c = static_cast<char>(rng());
  return t;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("cli: repack --checkpoint converts every layer of an awq or gptq checkpoint", "[cli]") {
  test::TempDir td;
  const std::string cache = td.file("kernels.db");
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  struct Layer {
    std::string prefix;
    int64_t k, n;
  };
  const std::vector<Layer> layers = {{"model.layers.0.mlp.up_proj", 128, 48},
                                     {"model.layers.0.mlp.down_proj", 64, 32},
                                     {"model.layers.1.mlp.up_proj", 128, 48}};
  const int64_t g = 64;

  SECTION("awq, from --from") {
    std::map<std::string, io::Tensor> ck;
    std::map<std::string, PlainQuant> plain;
    for (const auto& l : layers) {
      PlainQuant p = random_layer(rng, l.k, l.n, g);
      ck[l.prefix + ".qweight"] = words_tensor(pack_awq_qweight(p), {l.k, l.n / 8});
      ck[l.prefix + ".qzeros"] = words_tensor(pack_along_n(p.z, l.k / g, l.n, true), {l.k / g, l.n / 8});
      ck[l.prefix + ".scales"] = scales_tensor(rng, l.k / g, l.n);
      plain[l.prefix] = p;
    }
    ck["model.norm.weight"] = scales_tensor(rng, 1, 64);  // not quantized: carried over unchanged
    ck["model.embed_tokens.weight"] = scales_tensor(rng, 16, 64);
    const std::string in = td.file("awq.safetensors"), out = td.file("native.safetensors"), man = td.file("specs.jsonl");
    io::write_safetensors(in, ck);
    auto r = test::run_qjit("repack --checkpoint '" + in + "' --from awq --out '" + out + "' --manifest '" + man + "'", cache);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("repacked 3 awq layers") != std::string::npos);
    CHECK(r.out.find("carried 2 other tensors unchanged") != std::string::npos);
    const auto header = io::read_safetensors_header(out);
    CHECK(header.tensors.size() == 11);
    for (const char* name : {"model.norm.weight", "model.embed_tokens.weight"}) {
      const io::Tensor t = io::read_tensor(out + ":" + name);
      CHECK(t.dtype == ck[name].dtype);
      CHECK(t.shape == ck[name].shape);
      CHECK(t.bytes == ck[name].bytes);
    }
    for (const auto& l : layers) {
      INFO(l.prefix);
      const PlainQuant& p = plain[l.prefix];
      CHECK(words_of(io::read_tensor(out + ":" + l.prefix + ".qweight")) == pack_native(p));
      const io::Tensor z = io::read_tensor(out + ":" + l.prefix + ".zeros");
      CHECK(z.shape == std::vector<int64_t>{l.k / g, l.n});
      CHECK(std::vector<uint8_t>(z.bytes.begin(), z.bytes.end()) == p.z);
      CHECK(io::read_tensor(out + ":" + l.prefix + ".scales").bytes == ck[l.prefix + ".scales"].bytes);
    }
    // One line per distinct spec, with the layers that use it.
    std::vector<nlohmann::json> lines;
    std::istringstream m(slurp(man));
    for (std::string line; std::getline(m, line);) lines.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == 2);
    for (const auto& j : lines) {
      CHECK(j["op"] == "wq_gemm");
      if (j["shape"] == "k=128,n=48,g=64,bits=4,zero=int")
        CHECK(j["layers"] == nlohmann::json{"model.layers.0.mlp.up_proj", "model.layers.1.mlp.up_proj"});
      else
        CHECK(j["shape"] == "k=64,n=32,g=64,bits=4,zero=int");
    }
    // tune --manifest takes every spec of it, with --m (here without a GPU: the GPU-free part, exit 3).
    auto tune = test::run_qjit_env("CUDA_VISIBLE_DEVICES=", "tune --manifest '" + man + "' --m 1", cache);
    INFO(tune.out << tune.err);
    CHECK(tune.exit_code == 3);
    size_t compiled = 0;
    for (size_t at = 0; (at = tune.out.find("compiled in", at)) != std::string::npos; ++at) ++compiled;
    CHECK(compiled == 2);
    CHECK(tune.out.find("k=128") != std::string::npos);
    CHECK(tune.out.find("n=32") != std::string::npos);
    auto both = test::run_qjit("tune --manifest '" + man + "' --shape k=64,n=32", cache);
    CHECK(both.exit_code == 2);
    CHECK(both.err.find("drop --shape") != std::string::npos);
    std::ofstream(td.file("bad.jsonl")) << "{\"op\": \"wq_gemm\"}\n";
    auto bad = test::run_qjit("tune --manifest '" + td.file("bad.jsonl") + "'", cache);
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("line 1 needs") != std::string::npos);

    // The output may not be the input; a missing tensor is named; nothing is written then.
    auto same = test::run_qjit("repack --checkpoint '" + in + "' --from awq --out '" + in + "'", cache);
    CHECK(same.exit_code == 2);
    CHECK(same.err.find("refusing to overwrite") != std::string::npos);
    ck.erase("model.layers.0.mlp.down_proj.scales");
    io::write_safetensors(in, ck);
    fs::remove(out);
    auto missing = test::run_qjit("repack --checkpoint '" + in + "' --from awq --out '" + out + "'", cache);
    CHECK(missing.exit_code == 2);
    CHECK(missing.err.find("no tensor model.layers.0.mlp.down_proj.scales") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }

  SECTION("gptq, method, symmetry and format from config.json") {
    for (const bool sym : {true, false}) {
      INFO("sym " << sym);
      std::map<std::string, io::Tensor> ck;
      std::map<std::string, PlainQuant> plain;
      for (const auto& l : layers) {
        PlainQuant p = random_layer(rng, l.k, l.n, g);
        if (sym) std::fill(p.z.begin(), p.z.end(), uint8_t{8});
        // v1 zero points are 1..16 (stored as 0..15).
        else
          for (auto& z : p.z) z = static_cast<uint8_t>(1 + (rng() & 15));
        ck[l.prefix + ".qweight"] = words_tensor(pack_gptq_qweight(p), {l.k / 8, l.n});
        // checkpoint_format "gptq" (v1) stores zero − 1.
        std::vector<uint8_t> stored(p.z);
        for (auto& v : stored) v = static_cast<uint8_t>((v - 1) & 15);
        if (!sym) ck[l.prefix + ".qzeros"] = words_tensor(pack_along_n(stored, l.k / g, l.n, false), {l.k / g, l.n / 8});
        ck[l.prefix + ".scales"] = scales_tensor(rng, l.k / g, l.n);
        // GPTQ's g_idx in the plain order (no act-order): dropped after the check.
        std::vector<uint32_t> gi(l.k);
        for (int64_t i = 0; i < l.k; ++i) gi[i] = static_cast<uint32_t>(i / g);
        ck[l.prefix + ".g_idx"] = words_tensor(gi, {l.k});
        plain[l.prefix] = p;
      }
      const std::string in = td.file("gptq.safetensors"), out = td.file("native_gptq.safetensors"),
                        cfg = td.file("config.json");
      io::write_safetensors(in, ck);
      std::ofstream(cfg) << nlohmann::json{{"quantization_config", {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", g},
                                                                    {"sym", sym}, {"desc_act", false},
                                                                    {"checkpoint_format", "gptq"}}}}
                                .dump();
      auto r = test::run_qjit("repack --checkpoint '" + in + "' --config '" + cfg + "' --out '" + out + "' --json", cache);
      INFO(r.out << r.err);
      REQUIRE(r.exit_code == 0);
      const auto j = nlohmann::json::parse(r.out);
      CHECK(j["from"] == "gptq");
      CHECK(j["layers"] == 3);
      for (const auto& l : layers) {
        INFO(l.prefix);
        PlainQuant p = plain[l.prefix];
        CHECK(words_of(io::read_tensor(out + ":" + l.prefix + ".qweight")) == pack_native(p));
        CHECK(io::read_safetensors_header(out).tensors.count(l.prefix + ".zeros") == (sym ? 0u : 1u));
        if (!sym) {
          const io::Tensor z = io::read_tensor(out + ":" + l.prefix + ".zeros");
          CHECK(std::vector<uint8_t>(z.bytes.begin(), z.bytes.end()) == p.z);
        }
      }
      CHECK(j["specs"][0]["shape"].get<std::string>().find(sym ? "zero=sym" : "zero=int") != std::string::npos);
      CHECK(j["carried"] == 0);
      CHECK_FALSE(io::read_safetensors_header(out).tensors.count(layers[0].prefix + ".g_idx"));
    }
    // An act-order g_idx (rows reordered) cannot be expressed in the native layout: refused, named.
    {
      std::map<std::string, io::Tensor> ck;
      const Layer& l = layers[0];  // two groups of k, so the reversed order differs from k / g
      PlainQuant p = random_layer(rng, l.k, l.n, g);
      ck[l.prefix + ".qweight"] = words_tensor(pack_gptq_qweight(p), {l.k / 8, l.n});
      ck[l.prefix + ".qzeros"] = words_tensor(pack_along_n(p.z, l.k / g, l.n, false), {l.k / g, l.n / 8});
      ck[l.prefix + ".scales"] = scales_tensor(rng, l.k / g, l.n);
      std::vector<uint32_t> gi(l.k);
      for (int64_t i = 0; i < l.k; ++i) gi[i] = static_cast<uint32_t>((l.k - 1 - i) / g);
      ck[l.prefix + ".g_idx"] = words_tensor(gi, {l.k});
      const std::string in = td.file("actorder.safetensors");
      io::write_safetensors(in, ck);
      auto r = test::run_qjit("repack --checkpoint '" + in + "' --from gptq --out '" + td.file("y.safetensors") + "'", cache);
      CHECK(r.exit_code == 2);
      CHECK(r.err.find(l.prefix + ".g_idx is not the plain order") != std::string::npos);
      CHECK_FALSE(fs::exists(td.file("y.safetensors")));
    }
    // A config the repack cannot follow is refused by what it says.
    const std::string cfg = td.file("bad.json");
    std::ofstream(cfg) << R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}})";
    auto r = test::run_qjit("repack --checkpoint '" + td.file("gptq.safetensors") + "' --config '" + cfg + "' --out '" +
                                td.file("x.safetensors") + "'",
                            cache);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("the config says 128") != std::string::npos);
    std::ofstream(cfg) << R"({"quantization_config": {"quant_method": "exl2", "bits": 4}})";
    r = test::run_qjit("repack --checkpoint '" + td.file("gptq.safetensors") + "' --config '" + cfg + "' --out '" +
                           td.file("x.safetensors") + "'",
                       cache);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("quant_method 'exl2'") != std::string::npos);
  }
}
