// .npy and .safetensors reading and writing (io/tensor_file.h): round trips
// of every dtype and shape, files as NumPy and the safetensors library lay
// them out, and damaged files refused by name.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "codegen/error.h"
#include "io/tensor_file.h"
#include "tests/helpers.h"

using namespace qjit::io;
using qjit::test::TempDir;

using qjit::test::error_of;

namespace {

Tensor random_tensor(DType t, std::vector<int64_t> shape, std::mt19937& rng) {
  Tensor x{t, std::move(shape), {}};
  x.bytes.resize(static_cast<size_t>(x.elements()) * dtype_size(t));
  for (auto& c : x.bytes) c = static_cast<char>(rng());
  return x;
}

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

}  // namespace

TEST_CASE("npy: every dtype and shape round-trips; NumPy's own header forms parse", "[io]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (DType t : {DType::i8, DType::u8, DType::i16, DType::u16, DType::i32, DType::u32, DType::i64, DType::u64,
                  DType::f16, DType::f32, DType::f64, DType::boolean})
    for (const auto& shape : std::vector<std::vector<int64_t>>{{}, {0}, {5}, {2, 3}, {3, 1, 4}, {1, 2, 3, 4}}) {
      const Tensor x = random_tensor(t, shape, rng);
      const std::string file = npy_bytes(x);
      INFO(dtype_name(t) << " of " << shape.size() << " dimensions");
      CHECK(file.size() % 64 == static_cast<size_t>(x.bytes.size() % 64));  // the header ends on 64 bytes
      const Tensor y = parse_npy(file, "x.npy");
      CHECK(y.dtype == t);
      CHECK(y.shape == shape);
      CHECK(y.bytes == x.bytes);
    }
  // As numpy.save writes it (version 1.0, single quotes, trailing comma), and a 3.0 header with double quotes.
  const std::string h1 = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }";
  std::string v1 = std::string("\x93NUMPY\x01\x00", 8) + char(118) + '\0' + h1 + std::string(118 - h1.size() - 1, ' ') + "\n";
  v1 += le32(1) + le32(2) + le32(3) + le32(0xffffffff);
  const Tensor a = parse_npy(v1, "a.npy");
  CHECK(a.shape == std::vector<int64_t>{2, 2});
  CHECK(a.bytes.substr(12) == le32(0xffffffff));
  const std::string h3 = "{\"descr\": \"|u1\", \"fortran_order\": False, \"shape\": (3,)}\n";
  const std::string v3 = std::string("\x93NUMPY\x03\x00", 8) + le32(static_cast<uint32_t>(h3.size())) + h3 + "abc";
  CHECK(parse_npy(v3, "b.npy").bytes == "abc");
}

TEST_CASE("npy: damaged files are refused by name", "[io]") {
  const std::string good = npy_bytes(Tensor{DType::i32, {2, 3}, std::string(24, '\1')});
  auto with_header = [](const std::string& dict, const std::string& data) {
    return std::string("\x93NUMPY\x01\x00", 8) + char(dict.size()) + char(dict.size() >> 8) + dict + data;
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"NUMPY" + good.substr(5), "no \\x93NUMPY magic"},
      {good.substr(0, 9), "no \\x93NUMPY magic"},  // shorter than the fixed part
      {good.substr(0, 40), "the .npy header runs past the end"},
      {good.substr(0, good.size() - 1), "holds 23 bytes of data; its header says 24"},
      {good + "x", "holds 25 bytes"},
      {with_header("{'descr': '>i4', 'fortran_order': False, 'shape': (1,), }", "abcd"), "big-endian"},
      {with_header("{'descr': '<i4', 'fortran_order': True, 'shape': (1,), }", "abcd"), "Fortran-order"},
      {with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", "abcdefgh"), "unsupported .npy dtype"},
      {with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999, 99999999999999), }", ""),
       "too large"},
      {with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (-1,), }", ""), "malformed .npy shape"},
      {with_header("{'fortran_order': False, 'shape': (1,), }", "abcd"), "no 'descr'"},
      {std::string("\x93NUMPY\x07\x00", 8) + "\x10\x00" + std::string(16, ' '), "format version 7"},
  };
  for (const auto& [file, needle] : bad) {
    const std::string e = error_of([&] { parse_npy(file, "w.npy"); });
    INFO(e);
    CHECK_THAT(e, Catch::Contains("w.npy"));
    CHECK_THAT(e, Catch::Contains(needle));
  }
}

TEST_CASE("safetensors: tensors round-trip through files; bad headers are refused by name", "[io]") {
  TempDir dir;
  std::mt19937 rng(3);
  const std::map<std::string, Tensor> tensors = {
      {"model.layers.0.mlp.up_proj.qweight", random_tensor(DType::i32, {64, 2}, rng)},
      {"model.layers.0.mlp.up_proj.scales", random_tensor(DType::f16, {2, 16}, rng)},
      {"bf", random_tensor(DType::bf16, {3}, rng)},
      {"empty", random_tensor(DType::f32, {0, 4}, rng)}};
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}});
  const SafetensorsHeader h = read_safetensors_header(path);
  CHECK(h.tensors.size() == 4);
  CHECK(h.metadata == nlohmann::json{{"format", "pt"}});
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const Tensor r = read_tensor(path + ":" + name);
    CHECK(r.dtype == t.dtype);
    CHECK(r.shape == t.shape);
    CHECK(r.bytes == t.bytes);
  }
  uint64_t data_start = UINT64_MAX;
  for (const auto& [name, e] : h.tensors) data_start = std::min(data_start, e.begin);
  CHECK(data_start % 8 == 0);  // the header is padded so that the data starts 8-byte aligned
  CHECK_THAT(error_of([&] { read_tensor(path); }), Catch::Contains("holds 4 tensors; name one"));
  CHECK_THAT(error_of([&] { read_tensor(path + ":nope"); }), Catch::Contains("has no tensor 'nope'"));
  write_safetensors(dir.file("one.safetensors"), {{"w", tensors.at("bf")}});
  CHECK(read_tensor(dir.file("one.safetensors")).bytes == tensors.at("bf").bytes);
  CHECK_THAT(error_of([&] { read_tensor(dir.path.string() + "/x.safetensors"); }), Catch::Contains("cannot read"));
  std::filesystem::create_directory(dir.file("d.npy"));
  CHECK_THAT(error_of([&] { read_tensor(dir.file("d.npy")); }), Catch::Contains("is a folder"));

  auto file_with = [](const std::string& header, size_t data) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(header.size() >> (8 * i));
    return s + header + std::string(data, '\0');
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "runs past the end"},
      {file_with(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4), "lie outside"},
      {file_with(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8), "different byte count"},
      {file_with(R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})", 8), "bad shape"},
      {file_with(R"({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}})", 8), "unsupported dtype"},
      {file_with(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8), "lie outside"},
      {file_with(R"({"a": {"dtype": "F32", "shape": [1]}})", 8), "needs dtype, shape and data_offsets"},
      {file_with("[1, 2]", 0), "not a JSON object"},
      {file_with(std::string(100, '['), 0), "nests deeper"},
      {"abc", "shorter than its 8-byte header length"},
  };
  for (const auto& [file, needle] : bad) {
    const std::string e = error_of([&] { parse_safetensors_header(file, file.size(), "w.safetensors"); });
    INFO(e);
    CHECK_THAT(e, Catch::Contains("w.safetensors"));
    CHECK_THAT(e, Catch::Contains(needle));
  }
}

TEST_CASE("repack reads qweight and qzeros from .npy and .safetensors, bit-equal to raw files", "[io][cli]") {
  TempDir dir;
  std::mt19937 rng(std::random_device{}());
  const Tensor qweight = random_tensor(DType::i32, {64, 2}, rng), qzeros = random_tensor(DType::i32, {2, 2}, rng);
  std::ofstream(dir.file("qw.bin"), std::ios::binary) << qweight.bytes;
  std::ofstream(dir.file("qz.bin"), std::ios::binary) << qzeros.bytes;
  write_npy(dir.file("qw.npy"), qweight);
  write_npy(dir.file("qz.npy"), qzeros);
  write_safetensors(dir.file("m.safetensors"), {{"l.qweight", qweight}, {"l.qzeros", qzeros},
                                                {"l.scales", random_tensor(DType::f16, {2, 16}, rng)}});
  auto repack = [&](const std::string& qw, const std::string& qz, const std::string& out, const std::string& extra = "") {
    return qjit::test::run_qjit_env("CUDA_VISIBLE_DEVICES=", "repack --from awq --shape k=64,n=16,g=32 --qweight '" + qw +
                                        "' --qzeros '" + qz + "' --out-qweight '" + dir.file(out + ".q") +
                                        "' --out-zeros '" + dir.file(out + ".z") + "' " + extra,
                                    dir.file("unused.db"));
  };
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  REQUIRE(repack(dir.file("qw.bin"), dir.file("qz.bin"), "raw").exit_code == 0);
  const auto npy = repack(dir.file("qw.npy"), dir.file("qz.npy"), "npy");
  INFO(npy.err);
  REQUIRE(npy.exit_code == 0);
  const auto st = repack(dir.file("m.safetensors") + ":l.qweight", dir.file("m.safetensors") + ":l.qzeros", "st",
                         "--scales '" + dir.file("m.safetensors") + ":l.scales'");
  INFO(st.err);
  REQUIRE(st.exit_code == 0);
  for (const char* ext : {".q", ".z"}) {
    CHECK(slurp(dir.file(std::string("npy") + ext)) == slurp(dir.file(std::string("raw") + ext)));
    CHECK(slurp(dir.file(std::string("st") + ext)) == slurp(dir.file(std::string("raw") + ext)));
  }
  // a tensor of the wrong shape or type is named with what was expected
  const auto shape = repack(dir.file("qz.npy"), dir.file("qz.npy"), "bad");
  CHECK(shape.exit_code == 2);
  CHECK_THAT(shape.err, Catch::Contains("has shape [2, 2]; expected awq qweight [64, 2]"));
  const auto type = repack(dir.file("m.safetensors") + ":l.scales", dir.file("qz.npy"), "bad");
  CHECK(type.exit_code == 2);
  CHECK_THAT(type.err, Catch::Contains("holds float16; expected int32"));
  const auto whole = repack(dir.file("m.safetensors"), dir.file("qz.npy"), "bad");
  CHECK(whole.exit_code != 0);
  CHECK_THAT(whole.err, Catch::Contains("holds 3 tensors; name one"));
}

TEST_CASE("le32 words: little-endian bytes and back", "[io]") {
  const std::vector<uint32_t> words = {0x00000000u, 0x04030201u, 0xffffffffu, 0x80000001u};
  const std::string bytes = qjit::io::le32_bytes(words);
  CHECK(bytes == std::string("\x00\x00\x00\x00\x01\x02\x03\x04\xff\xff\xff\xff\x01\x00\x00\x80", 16));
  CHECK(qjit::io::le32_words(bytes) == words);
  CHECK(qjit::io::le32_words(bytes.substr(0, 7)).size() == 1);  // a trailing partial word is not a word
}
