// Tests for the qjit command without a GPU: help, exit codes, error messages
// naming the bad value, the GPU-free paths of tune/source/doctor/import, and
// cache errors (corrupt file, unwritable path). The GPU is hidden from qjit
// (CUDA_VISIBLE_DEVICES="") so that these hold on a GPU machine too.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "codegen/nvrtc.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/spec.h"
#include "tests/helpers.h"
#include "io/tensor_file.h"
#include "tuner/reference/w8a8_fp8.h"
#include "tuner/reference/w8a8_quant.h"
#include "tuner/reference/wq_gemm.h"
#include "tuner/multi_device.h"
#include "tuner/tuner.h"

using qjit::test::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Runs qjit with CUDA_VISIBLE_DEVICES="" so that it takes its no-GPU paths on
// every machine, the GPU test machine included (the CPU suite runs there too).
// The variable is restored at once: this process's own CUDA use is unaffected
// unless it first initialises CUDA in between, which nothing here does.
qjit::test::CommandResult run_qjit(const std::string& args, const std::string& cache,
                                   const std::string& stdin_text = "") {
  const char* old = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = old ? old : "";
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  auto r = qjit::test::run_qjit(args, cache, stdin_text);
  if (old) setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else unsetenv("CUDA_VISIBLE_DEVICES");
  return r;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::string describe(const qjit::test::CommandResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out.substr(0, 4000) +
         "\n--- stderr ---\n" + r.err.substr(0, 4000);
}

std::vector<std::string> nonempty_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Configs of fused_ffn d=256,h=64 (fp16, m=1) as the op spells them: the
// heuristic default, another legal candidate, and the default with warps=3.
const qjit::codegen::OpSpec& small_spec() {
  static const auto s = qjit::codegen::parse_spec("fused_ffn", "d=256,h=64");
  return s;
}
std::string legal_config() { return qjit::codegen::find_op("fused_ffn").default_config(small_spec()).dump(); }
std::string other_legal_config() { return qjit::codegen::find_op("fused_ffn").tunable_space(small_spec()).back().dump(); }
std::string warps3_config() {
  json c = json::parse(legal_config());
  c["warps"] = 3;
  return c.dump();
}

std::string record_line(const std::string& config) {
  return std::string(R"({"format":"qjit-record-v1","spec":{"op":"fused_ffn","d":256,"h":64,"m":1,"dtype":"fp16"},)") +
         R"("config":)" + config +
         R"(,"tuned":true,"median_us":3.5,"gbps":100.0,"pct_copy_bw":5.0,"verify_error":0.0,"created":"2025-01-01T00:00:00Z"})";
}

}  // namespace

TEST_CASE("cli: --help everywhere, unknown subcommands", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  auto top = run_qjit("--help", cache);
  INFO(describe(top));
  CHECK(top.exit_code == 0);
  CHECK(contains(top.out, "Usage"));
  CHECK(contains(top.out, "Exit codes"));
  for (const char* sub : {"tune", "bench", "source", "list", "show", "doctor", "export", "import", "ops"}) {
    auto r = run_qjit(std::string(sub) + " --help", cache);
    INFO(sub << ": " << describe(r));
    CHECK(r.exit_code == 0);
    CHECK(contains(r.out, "Usage"));
    CHECK(contains(r.out, sub));
  }
  auto v = run_qjit("--version", cache);
  CHECK(v.exit_code == 0);
  CHECK(contains(v.out, "qjit "));
  auto bad = run_qjit("frobnicate", cache);
  INFO(describe(bad));
  CHECK(bad.exit_code == 2);
  auto none = run_qjit("", cache);
  CHECK(none.exit_code == 2);
  auto badflag = run_qjit("list --no-such-flag", cache);
  CHECK(badflag.exit_code == 2);
  CHECK(contains(badflag.err, "--no-such-flag"));
  // qjit ops: every op's keys and arguments as codegen defines them; an unknown op is named.
  auto ops = run_qjit("ops --op w8a8_gemm", cache);
  INFO(describe(ops));
  CHECK(ops.exit_code == 0);
  CHECK(contains(ops.out, "format (int8|e4m3), default \"int8\""));
  CHECK(contains(ops.out, "arguments: x wq w_scale w_offset w_sum bias y m (int)"));
  auto no_op = run_qjit("ops --op w4a4_gemm --json", cache);
  CHECK(no_op.exit_code == 2);
  CHECK(contains(no_op.err, "unknown op 'w4a4_gemm'"));
  // help and usage errors never create the cache
  CHECK_FALSE(fs::exists(cache));
}

TEST_CASE("cli: bad arguments exit 2 and name the bad value", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"tune --op nope --shape d=1,h=1", "'nope'"},
      {"tune --op fused_ffn --shape 'd=4096,h'", "'h'"},
      {"tune --op fused_ffn --shape d=4096,h=64 --m 9", "m=9"},
      {"tune --op fused_ffn --shape d=4096,h=64 --m 1-x", "1-x"},
      {"tune --op wq_gemm --shape k=4096,n=11008 --m 0-8", "0-8"},
      {"tune --op fused_ffn --shape d=4096,h=64 --m 1-1000000000000", "at most 4096"},
      {"tune --op fused_ffn --shape d=4096,h=64,m=2 --m 3", "m given both"},
      {"tune --op fused_ffn --shape d=4096,h=64 --budget xyz", "xyz"},
      {"tune --op fused_ffn --shape d=4096,h=64 --only '{bad'", "{bad"},
      {"tune --op fused_ffn --shape d=4096,h=64 --only '[1]'", "JSON object of config keys"},
      {"tune --op wq_gemm --shape k=4096,n=11008,m=16 --only '{\"family\":\"wgmma\"}'", "matches none of the"},
      {"tune --op fused_ffn --shape d=4096,h=64 --dtype fp8", "dtype=fp8"},
      {"tune --op fused_ffn --shape d=0,h=64", "d=0"},
      {"tune --op fused_ffn", "--shape"},
      {"tune --op fused_ffn --shape d=4096,h=64 --devices x", "'x' is not a device number"},
      {"tune --op fused_ffn --shape d=4096,h=64 --devices 0,1,0", "device 0 is named twice"},
      {"tune --op fused_ffn --shape d=4096,h=64 --devices 0,,1", "'' is not a device number"},
      {"tune --op fused_ffn --shape d=4096,h=64 --devices -1", "'-1' is not a device number"},
      {"tune --op fused_ffn --shape d=4096,h=64 --seed minus", "--seed"},
      {"source --op fused_ffn --shape d=256,h=64,zz=1", "'zz'"},
      {"source --op fused_ffn --shape d=256,h=64 --m 1,2", "one spec"},
      {"source --op fused_ffn --shape d=256,h=64 --config '{bad'", "{bad"},
      {"source --op fused_ffn --shape d=256,h=64 --config '" + warps3_config() + "'", "warps must be"},
      {"source --op fused_ffn --shape d=256,h=64 --config '{\"warps\":4}'", "config needs"},
      {"source --op fused_ffn --shape d=255,h=64 --config '" + legal_config() + "'", "d=255"},
      {"show", "key prefix"},
      {"bench --op fused_ffn --shape d=1,h", "'h'"},
      {"bench --op wq_gemm --shape k=4096,n=11008,m=1 --sustain 100", "--sustain: Value 100"},
      {"bench --op wq_gemm --shape k=4096,n=11008,m=1 --sustain soon", "Value soon"},
  };
  for (const auto& c : cases) {
    auto r = run_qjit(c.args, cache);
    INFO("qjit " << c.args << "\n" << describe(r));
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, c.needle));
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: tune without a GPU does the GPU-free part and exits 3", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  auto r = run_qjit("tune --op fused_ffn --shape d=256,h=64", cache);
  INFO(describe(r));
  CHECK(r.exit_code == 3);
  CHECK(contains(r.out, "No usable GPU"));
  // the path of the generated source is printed and the file holds the kernel
  const auto pos = r.out.find("source: ");
  REQUIRE(pos != std::string::npos);
  const std::string path = r.out.substr(pos + 8, r.out.find('\n', pos) - pos - 8);
  INFO("source file " << path);
  REQUIRE(fs::exists(path));
  CHECK(fs::path(path).parent_path().parent_path() == td.path);
  const std::string text = slurp(path);
  CHECK(contains(text, "constexpr int kD = 256;"));
  CHECK(contains(text, "constexpr int kH = 64;"));
  CHECK(contains(text, "extern \"C\" __global__"));

  // one source per m of a range, for the requested arch
  auto r2 = run_qjit("tune --op fused_ffn --shape d=256,h=64,dtype=bf16 --m 1-3 --arch sm_80", cache);
  INFO(describe(r2));
  CHECK(r2.exit_code == 3);
  CHECK(contains(r2.out, "sm_80"));
  int files = 0;
  for (auto& e : fs::directory_iterator(td.path / "sources"))
    files += contains(e.path().filename().string(), "bf16");
  CHECK(files == 3);
}

TEST_CASE("cli: tune --exhaustive, --devices and --seed are accepted; without a GPU the GPU-free part runs", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  for (const char* args : {"--exhaustive --devices all --seed 3", "--devices 0,1 -q"}) {
    auto r = run_qjit(std::string("tune --op fp_lut --shape n=4096,fn=exp ") + args, cache);
    INFO(args << "\n" << describe(r));
    CHECK(r.exit_code == 3);
    CHECK(contains(r.out, "No usable GPU"));
  }
}

TEST_CASE("tune --devices: the list of GPUs", "[cli]") {
  using qjit::tuner::parse_device_list;
  CHECK(parse_device_list("all", 3) == std::vector<int>{0, 1, 2});
  CHECK(parse_device_list("all", -1).empty());  // the count is not known without a GPU
  CHECK(parse_device_list("1,0", 2) == std::vector<int>{1, 0});
  CHECK(parse_device_list("7", -1) == std::vector<int>{7});
  CHECK_THROWS_WITH(parse_device_list("2", 2), Catch::Contains("there is no device 2; 2 visible (0 to 1)"));
  CHECK_THROWS_WITH(parse_device_list("", 2), Catch::Contains("empty"));
  CHECK_THROWS_WITH(parse_device_list("0 1", 2), Catch::Contains("'0 1' is not a device number"));
  CHECK_THROWS_WITH(parse_device_list("99999", -1), Catch::Contains("not a device number"));
  using qjit::runtime::VisibleDevice;
  CHECK_NOTHROW(
      qjit::tuner::require_one_kind({{0, "NVIDIA H100 80GB HBM3", "9.0"}, {1, "NVIDIA H100 80GB HBM3", "9.0"}}));
  CHECK_THROWS_WITH(qjit::tuner::require_one_kind({{0, "NVIDIA H100 80GB HBM3", "9.0"}, {1, "NVIDIA H200", "9.0"}}),
                    Catch::Contains("1: NVIDIA H200 (cc 9.0)"));
}

TEST_CASE("cli: source prints code, PTX, logs and the tunable space without a GPU", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  auto r = run_qjit("source --op fused_ffn --shape d=256,h=64", cache);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  const auto spec = qjit::codegen::parse_spec("fused_ffn", "d=256,h=64");
  const auto& op = qjit::codegen::find_op("fused_ffn");
  // exactly the generated source of the default config
  CHECK(r.out == qjit::codegen::generate_source(spec, op.default_config(spec)).text);
  CHECK(contains(r.out, "constexpr int kD = 256;"));

  for (const auto& c : {legal_config(), other_legal_config()}) {
    auto rc = run_qjit("source --op fused_ffn --shape d=256,h=64 --config '" + c + "'", cache);
    INFO(c << "\n" << describe(rc));
    CHECK(rc.exit_code == 0);
    CHECK(rc.out == qjit::codegen::generate_source(spec, json::parse(c)).text);
  }

  auto ptx = run_qjit("source --op fused_ffn --shape d=256,h=64 --ptx --arch sm_80", cache);
  INFO(describe(ptx));
  CHECK(ptx.exit_code == 0);
  CHECK(contains(ptx.out, ".target sm_80"));
  CHECK(contains(ptx.out, ".entry qjit_fused_ffn"));

  auto log = run_qjit("source --op fused_ffn --shape d=256,h=64,dtype=fp32 --log --arch sm_90", cache);
  INFO(describe(log));
  CHECK(log.exit_code == 0);
  CHECK(contains(log.out, "registers"));
  CHECK(contains(log.out, "sm_90"));

  auto configs = run_qjit("source --op fused_ffn --shape d=4096,h=64 --configs", cache);
  INFO(describe(configs));
  CHECK(configs.exit_code == 0);
  const auto lines = nonempty_lines(configs.out);
  const auto space = op.tunable_space(qjit::codegen::parse_spec("fused_ffn", "d=4096,h=64"));
  REQUIRE(lines.size() == space.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    CHECK(json::parse(lines[i]) == space[i]);
  }

  auto best = run_qjit("source --op fused_ffn --shape d=256,h=64 --best", cache);
  INFO(describe(best));
  CHECK(best.exit_code == 4);
  CHECK(best.out.empty());
  CHECK(contains(best.err, cache));
}

TEST_CASE("cli: a bad --arch is a usage error naming it", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  for (const char* args : {"source --op fused_ffn --shape d=256,h=64 --ptx --arch sm_1",
                           "tune --op fused_ffn --shape d=256,h=64 --arch sm_1"}) {
    auto r = run_qjit(args, cache);
    INFO(args << "\n" << describe(r));
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, "'sm_1'"));
  }
}

TEST_CASE("cli: list, show, export, doctor on an empty cache", "[cli]") {
  TempDir td;
  const std::string cache = td.file("sub/dir/kernels.db");  // folders are created
  auto l = run_qjit("list", cache);
  INFO(describe(l));
  CHECK(l.exit_code == 0);
  CHECK(contains(l.out, "0 kernel(s)"));
  CHECK(contains(l.out, cache));
  CHECK(fs::exists(cache));

  auto lj = run_qjit("list --json", cache);
  INFO(describe(lj));
  CHECK(lj.exit_code == 0);
  const json a = json::parse(lj.out);
  CHECK(a.is_array());
  CHECK(a.empty());

  auto s = run_qjit("show abc", cache);
  CHECK(s.exit_code == 4);
  CHECK(contains(s.err, "nothing cached"));
  auto s2 = run_qjit("show --op fused_ffn --shape d=256,h=64", cache);
  CHECK(s2.exit_code == 4);

  auto e = run_qjit("export", cache);
  INFO(describe(e));
  CHECK(e.exit_code == 0);
  CHECK(e.out.empty());
  CHECK(contains(e.err, "0 record"));
  auto eo = run_qjit("export -o '" + td.file("out.jsonl") + "'", cache);
  CHECK(eo.exit_code == 0);
  CHECK(fs::exists(td.file("out.jsonl")));
  CHECK(fs::file_size(td.file("out.jsonl")) == 0);

  auto d = run_qjit("doctor", cache);
  INFO(describe(d));
  CHECK(d.exit_code == 0);
  CHECK(contains(d.out, "NVRTC"));
  CHECK(contains(d.out, "0 kernel(s)"));
  auto dj = run_qjit("doctor --json", cache);
  INFO(describe(dj));
  CHECK(dj.exit_code == 0);
  const json j = json::parse(dj.out);
  CHECK(j.at("gpu") == false);
  CHECK(j.at("nvrtc_version").get<std::string>() == qjit::codegen::nvrtc_version());
  CHECK(j.at("nvrtc_sm_80") == true);
  CHECK(j.at("nvrtc_sm_90") == true);
  CHECK(j.at("cache").at("path") == cache);
  CHECK(j.at("cache").at("kernels") == 0);
  CHECK(!j.at("no_gpu_reason").get<std::string>().empty());

  // --cache overrides QJIT_CACHE
  const std::string other = td.file("other.db");
  auto lo = run_qjit("list --cache '" + other + "'", cache);
  CHECK(lo.exit_code == 0);
  CHECK(contains(lo.out, other));
  CHECK(fs::exists(other));
}

TEST_CASE("cli: a corrupt or unreachable cache is an error naming the path", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");
  {
    const unsigned seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    std::ofstream f(cache, std::ios::binary);
    for (int i = 0; i < 8192; ++i) f.put(static_cast<char>(rng()));
  }
  const std::string before = slurp(cache);
  for (const char* cmd : {"list", "list --json", "export", "show abc", "source --op fused_ffn --shape d=256,h=64 --best"}) {
    auto r = run_qjit(cmd, cache);
    INFO(cmd << "\n" << describe(r));
    CHECK(r.exit_code == 1);
    CHECK(contains(r.err, cache));
  }
  CHECK(slurp(cache) == before);  // a foreign file is never overwritten
  auto d = run_qjit("doctor", cache);
  INFO(describe(d));
  CHECK(d.exit_code == 1);
  CHECK(contains(d.out, cache));

  // a path under a regular file cannot be created
  const std::string file = td.file("plain");
  std::ofstream(file) << "x";
  const std::string under = file + "/kernels.db";
  for (const char* cmd : {"list", "export", "tune --op fused_ffn --shape d=256,h=64"}) {
    auto r = run_qjit(cmd, under);
    INFO(cmd << "\n" << describe(r));
    CHECK(r.exit_code == 1);
    CHECK(contains(r.err, under));
    CHECK_FALSE(contains(r.err, "internal error"));
  }
  // import checks its lines first, then fails on the cache
  const std::string rec = td.file("rec.jsonl");
  std::ofstream(rec) << record_line(legal_config()) << "\n";
  auto ri = run_qjit("import '" + rec + "'", under);
  INFO(describe(ri));
  CHECK(ri.exit_code == 1);
  CHECK(contains(ri.err, under));
}

TEST_CASE("cli: import checks every line first and imports all or nothing", "[cli]") {
  TempDir td;
  const std::string cache = td.file("kernels.db");

  const std::string mixed = td.file("mixed.jsonl");
  std::ofstream(mixed) << record_line(legal_config()) << "\n\n" << "{\"format\":\"qjit-record-v1\", oops\n";
  auto r = run_qjit("import '" + mixed + "'", cache);
  INFO(describe(r));
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, mixed + ":3"));
  CHECK(contains(r.err, "nothing imported"));
  {
    qjit::cache::Store store(cache);
    CHECK(store.all_imports().empty());
  }

  // an illegal config or a bad spec is refused the same way, naming its line
  const std::string badcfg = td.file("badcfg.jsonl");
  std::ofstream(badcfg) << record_line(legal_config()) << "\n"
                        << record_line(warps3_config())
                        << "\n";
  auto r2 = run_qjit("import '" + badcfg + "'", cache);
  INFO(describe(r2));
  CHECK(r2.exit_code == 2);
  CHECK(contains(r2.err, ":2"));
  CHECK(contains(r2.err, "warps"));
  const std::string wrongfmt = td.file("wrongfmt.jsonl");
  std::ofstream(wrongfmt) << R"({"format":"other","spec":{"op":"fused_ffn","d":256,"h":64},"config":{}})" << "\n";
  auto r3 = run_qjit("import '" + wrongfmt + "'", cache);
  CHECK(r3.exit_code == 2);
  CHECK(contains(r3.err, ":1"));
  auto r4 = run_qjit("import '" + td.file("missing.jsonl") + "'", cache);
  CHECK(r4.exit_code == 2);
  CHECK(contains(r4.err, "missing.jsonl"));
  {
    qjit::cache::Store store(cache);
    CHECK(store.all_imports().empty());
  }

  // a valid record is stored, waiting for a GPU to verify it
  const std::string good = td.file("good.jsonl");
  std::ofstream(good) << record_line(legal_config()) << "\n";
  auto ok = run_qjit("import '" + good + "'", cache);
  INFO(describe(ok));
  CHECK(ok.exit_code == 0);
  CHECK(contains(ok.err, "imported 1 record"));
  {
    qjit::cache::Store store(cache);
    const auto imports = store.all_imports();
    REQUIRE(imports.size() == 1);
    CHECK(imports[0].op == "fused_ffn");
    CHECK(imports[0].spec_json == R"({"act":"silu","d":256,"dtype":"fp16","h":64,"m":1,"op":"fused_ffn"})");
    CHECK(imports[0].config == json::parse(legal_config()));
    CHECK(imports[0].source_record.at("median_us") == 3.5);
  }
  // from stdin too
  auto viastdin = run_qjit("import -", cache, record_line(legal_config()) + "\n");
  INFO(describe(viastdin));
  CHECK(viastdin.exit_code == 0);
  {
    qjit::cache::Store store(cache);
    CHECK(store.all_imports().size() == 2);
  }
  // imports are not kernels: list still shows none
  auto l = run_qjit("list", cache);
  CHECK(l.exit_code == 0);
  CHECK(contains(l.out, "0 kernel(s)"));
}

namespace {

void write_le32(const std::string& path, const std::vector<uint32_t>& words) {
  std::string bytes(words.size() * 4, '\0');
  for (size_t i = 0; i < words.size(); ++i)
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>(words[i] >> (8 * b));
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<uint32_t> read_le32(const std::string& path) {
  const std::string bytes = slurp(path);
  std::vector<uint32_t> words(bytes.size() / 4);
  for (size_t i = 0; i < words.size(); ++i)
    for (int b = 0; b < 4; ++b) words[i] |= uint32_t{static_cast<unsigned char>(bytes[4 * i + b])} << (8 * b);
  return words;
}

bool no_tmp_files(const fs::path& dir) {
  for (auto& e : fs::directory_iterator(dir))
    if (contains(e.path().filename().string(), ".tmp.")) return false;
  return true;
}

}  // namespace

TEST_CASE("cli: repack converts awq and gptq tensors to the native layout bit-exactly", "[cli]") {
  using namespace qjit::tuner;
  TempDir td;
  const std::string cache = td.file("kernels.db");
  const int64_t k = 256, n = 48, g = 64;
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  PlainQuant p;
  p.k = k, p.n = n, p.g = g, p.bits = 4;
  p.q.resize(k * n);
  p.z.resize((k / g) * n);
  for (auto& v : p.q) v = static_cast<uint8_t>(rng() & 15);
  for (auto& v : p.z) v = static_cast<uint8_t>(rng() & 15);
  const std::string shape = " --shape k=256,n=48,g=64";

  auto help = run_qjit("repack --help", cache);
  INFO(describe(help));
  CHECK(help.exit_code == 0);
  CHECK(contains(help.out, "repack"));
  CHECK(contains(help.out, "Scales are not touched"));

  // awq
  const std::string aq = td.file("awq_qweight.bin"), az = td.file("awq_qzeros.bin");
  write_le32(aq, pack_awq_qweight(p));
  write_le32(az, pack_along_n(p.z, k / g, n, true));
  const std::string oq = td.file("native_qweight.bin"), oz = td.file("native_zeros.bin");
  const std::string sc = td.file("scales.bin");  // the right length: --scales passes
  write_le32(sc, std::vector<uint32_t>(k / g * n / 2, 0x3c003c00u));
  auto r = run_qjit("repack --from awq" + shape + " --qweight '" + aq + "' --qzeros '" + az + "' --scales '" + sc +
                        "' --out-qweight '" + oq +
                        "' --out-zeros '" + oz + "'",
                    cache);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "wq_gemm k=256,n=48,g=64,bits=4,zero=int"));
  CHECK(fs::file_size(oq) == static_cast<uintmax_t>(k * n / 2));
  CHECK(read_le32(oq) == pack_native(p));
  CHECK(unpack_native(read_le32(oq), k, n, 4) == p.q);
  const std::string zbytes = slurp(oz);
  CHECK(std::vector<uint8_t>(zbytes.begin(), zbytes.end()) == p.z);
  CHECK(no_tmp_files(td.path));
  CHECK_FALSE(fs::exists(cache));

  // gptq, integer zeros, --json; overwrites the previous outputs
  const std::string gq = td.file("gptq_qweight.bin"), gz = td.file("gptq_qzeros.bin");
  write_le32(gq, pack_gptq_qweight(p));
  write_le32(gz, pack_along_n(p.z, k / g, n, false));
  fs::remove(oq);
  std::ofstream(oz) << "stale";
  auto rg = run_qjit("repack --from gptq" + shape + " --qweight '" + gq + "' --qzeros '" + gz + "' --out-qweight '" +
                         oq + "' --out-zeros '" + oz + "' --json",
                     cache);
  INFO(describe(rg));
  REQUIRE(rg.exit_code == 0);
  const json j = json::parse(rg.out);
  CHECK(j.at("from") == "gptq");
  CHECK(j.at("k") == k);
  CHECK(j.at("n") == n);
  CHECK(j.at("g") == g);
  CHECK(j.at("bits") == 4);
  CHECK(j.at("zero") == "int");
  CHECK(j.at("wq_gemm") == "wq_gemm k=256,n=48,g=64,bits=4,zero=int");
  CHECK(j.at("out_qweight") == oq);
  CHECK(j.at("out_qweight_bytes") == k * n / 2);
  CHECK(j.at("out_zeros") == oz);
  CHECK(j.at("out_zeros_bytes") == (k / g) * n);
  CHECK(unpack_native(read_le32(oq), k, n, 4) == p.q);
  const std::string gzbytes = slurp(oz);
  CHECK(std::vector<uint8_t>(gzbytes.begin(), gzbytes.end()) == p.z);
  CHECK(no_tmp_files(td.path));

  // gptq --gptq-v1: qzeros store zero - 1, so the zero points written are nibble + 1 (a 15 becomes 16)
  std::vector<uint8_t> stored(p.z.size());
  for (size_t i = 0; i < p.z.size(); ++i) stored[i] = static_cast<uint8_t>(i % 7 == 0 ? 15 : p.z[i] & 7);
  const std::string vz = td.file("gptq_v1_qzeros.bin");
  write_le32(vz, pack_along_n(stored, k / g, n, false));
  auto rv = run_qjit("repack --from gptq --gptq-v1" + shape + " --qweight '" + gq + "' --qzeros '" + vz +
                         "' --out-qweight '" + oq + "' --out-zeros '" + oz + "' --json",
                     cache);
  INFO(describe(rv));
  REQUIRE(rv.exit_code == 0);
  CHECK(json::parse(rv.out).at("gptq_v1") == true);
  CHECK(unpack_native(read_le32(oq), k, n, 4) == p.q);
  const std::string vzbytes = slurp(oz);
  REQUIRE(vzbytes.size() == stored.size());
  for (size_t i = 0; i < stored.size(); ++i) CHECK(static_cast<uint8_t>(vzbytes[i]) == stored[i] + 1);
  auto bad_v1 = run_qjit("repack --from awq --gptq-v1" + shape + " --qweight '" + aq + "' --qzeros '" + az +
                             "' --out-qweight '" + oq + "' --out-zeros '" + oz + "'",
                         cache);
  CHECK(bad_v1.exit_code == 2);
  CHECK(contains(bad_v1.err, "--gptq-v1 is for --from gptq"));

  // gptq --sym: no qzeros read, no zeros written, zero=sym
  const std::string sq = td.file("sym_native.bin");
  auto rs = run_qjit("repack --from gptq --sym" + shape + " --qweight '" + gq + "' --out-qweight '" + sq + "'", cache);
  INFO(describe(rs));
  REQUIRE(rs.exit_code == 0);
  CHECK(contains(rs.out, "zero=sym"));
  CHECK(contains(rs.out, "wq_gemm k=256,n=48,g=64,bits=4,zero=sym"));
  CHECK(unpack_native(read_le32(sq), k, n, 4) == p.q);

  // errors: exit 2, naming the bad value; nothing written
  const std::string short_q = td.file("short_qweight.bin");
  auto words = pack_awq_qweight(p);
  words.pop_back();
  write_le32(short_q, words);
  const std::string fresh = td.file("fresh.bin"), fresh_z = td.file("fresh_zeros.bin");
  const std::string outs = " --out-qweight '" + fresh + "' --out-zeros '" + fresh_z + "'";
  struct Case {
    std::string args;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"repack --from awq" + shape + " --qweight '" + short_q + "' --qzeros '" + az + "'" + outs,
       {short_q, std::to_string(k * n / 2 - 4) + " bytes", "expected " + std::to_string(k * n / 2)}},
      {"repack --from awq" + shape + " --qweight '" + aq + "' --qzeros '" + az + "' --scales '" + az + "'" + outs,
       {"--scales", std::to_string(k / g * n / 2) + " bytes", "expected " + std::to_string(k / g * n * 2)}},
      {"repack --from awq --shape k=256,n=40,g=64 --qweight '" + aq + "' --qzeros '" + az + "'" + outs,
       {"n=40", "multiple of 16"}},
      {"repack --from awq --shape k=256,n=48,g=48 --qweight '" + aq + "' --qzeros '" + az + "'" + outs, {"g=48"}},
      {"repack --from awq --shape k=200,n=48,g=64 --qweight '" + aq + "' --qzeros '" + az + "'" + outs, {"k=200"}},
      {"repack --from awq --shape k=256,g=64 --qweight '" + aq + "' --qzeros '" + az + "'" + outs, {"n="}},
      {"repack --from awq --shape k=256,n=48,g=64,zz=1 --qweight '" + aq + "' --qzeros '" + az + "'" + outs, {"'zz'"}},
      {"repack --from exl2" + shape + " --qweight '" + aq + "' --qzeros '" + az + "'" + outs, {"exl2"}},
      {"repack --from awq" + shape + " --qweight '" + aq + "'" + outs, {"--qzeros"}},
      {"repack --from awq" + shape + " --qweight '" + td.file("missing.bin") + "' --qzeros '" + az + "'" + outs,
       {"missing.bin"}},
      {"repack --from awq" + shape + " --qweight '" + aq + "' --qzeros '" + az + "' --out-qweight '" + aq +
           "' --out-zeros '" + fresh_z + "'",
       {aq, "input"}},
      {"repack --from awq" + shape + " --qweight '" + aq + "' --qzeros '" + az + "' --out-qweight '" + fresh +
           "' --out-zeros '" + td.path.string() + "/./awq_qzeros.bin'",
       {"awq_qzeros.bin", "input"}},
  };
  const std::string aq_before = slurp(aq), az_before = slurp(az);
  for (const auto& c : cases) {
    auto e = run_qjit(c.args, cache);
    INFO("qjit " << c.args << "\n" << describe(e));
    CHECK(e.exit_code == 2);
    for (auto& needle : c.needles) CHECK(contains(e.err, needle));
    CHECK(e.out.empty());
    CHECK_FALSE(fs::exists(fresh));
    CHECK_FALSE(fs::exists(fresh_z));
  }
  CHECK(slurp(aq) == aq_before);
  CHECK(slurp(az) == az_before);
  CHECK(no_tmp_files(td.path));

  // an unwritable output folder is an I/O failure (exit 1), leaving nothing behind
  auto io = run_qjit("repack --from awq" + shape + " --qweight '" + aq + "' --qzeros '" + az + "' --out-qweight '" +
                         td.file("no/such/dir/q.bin") + "' --out-zeros '" + fresh_z + "'",
                     cache);
  INFO(describe(io));
  CHECK(io.exit_code == 1);
  CHECK(contains(io.err, "no/such/dir/q.bin"));
  CHECK_FALSE(fs::exists(fresh_z));
  CHECK(no_tmp_files(td.path));
}

TEST_CASE("cli: w8a8 pack writes the CPU quantizers' codes and block-major parameters", "[cli][w8a8]") {
  namespace io = qjit::io;
  using namespace qjit::tuner;
  TempDir td;
  const std::string cache = td.file("kernels.db");
  const int64_t n = 256, k = 384;
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(n * k);
  for (int64_t i = 0; i < n * k; ++i) w[i] = std::ldexp(u(rng), static_cast<int>((i / k / 128 + i % k / 128) % 4) * 3 - 6);
  io::write_npy(td.file("w.npy"), {io::DType::f32, {n, k}, std::string(reinterpret_cast<const char*>(w.data()), w.size() * 4)});
  auto as = [](const io::Tensor& t, auto zero) {
    std::vector<decltype(zero)> v(t.bytes.size() / sizeof(zero));
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    return v;
  };

  auto r = run_qjit("w8a8 pack --weights " + td.file("w.npy") + " --format e4m3 -o " + td.file("q.safetensors"), cache);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const Fp8Tiles t = quantize_fp8_tiles(w, n, k, 128, 128);
  const io::Tensor wq = io::read_tensor(td.file("q.safetensors") + ":wq"), ws = io::read_tensor(td.file("q.safetensors") + ":w_scale");
  CHECK((wq.dtype == io::DType::u8 && wq.shape == std::vector<int64_t>{n, k}));
  CHECK(as(wq, uint8_t{}) == t.q);
  REQUIRE((ws.dtype == io::DType::f32 && ws.shape == std::vector<int64_t>{k / 128, n / 128}));
  const auto scale = as(ws, 0.0f);
  for (int64_t a = 0; a < n / 128; ++a)
    for (int64_t b = 0; b < k / 128; ++b) CHECK(scale[b * (n / 128) + a] == t.scale[a * (k / 128) + b]);

  r = run_qjit("w8a8 pack --weights " + td.file("w.npy") + " --rule symmetric --block 64 -o " + td.file("i.safetensors"), cache);
  REQUIRE(r.exit_code == 0);
  const BlockQuantized q = pack_weights(w, n, k, 64, BlockRule::symmetric);
  CHECK(as(io::read_tensor(td.file("i.safetensors") + ":wq"), int8_t{}) == q.q);
  const auto sums = as(io::read_tensor(td.file("i.safetensors") + ":w_sum"), int32_t{});
  CHECK(sums[5 * n + 7] == q.sum[7 * (k / 64) + 5]);  // [K/block][N]
  CHECK_FALSE(io::read_safetensors_header(td.file("i.safetensors")).tensors.count("w_offset"));

  r = run_qjit("w8a8 pack --weights " + td.file("w.npy") + " --format e4m3 --block 64 -o " + td.file("x.safetensors"), cache);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--format e4m3 takes 128"));
}

TEST_CASE("qjit tune --only: the candidates holding every key of the filter", "[cli]") {
  using namespace qjit;
  const auto space = codegen::find_op("wq_gemm").tunable_space(codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=256"));
  const auto ws = tuner::select_configs(space, {{"family", "wgmma"}, {"ws", 1}});
  const auto wgmma = tuner::select_configs(space, {{"family", "wgmma"}});
  REQUIRE(!ws.empty());
  CHECK(ws.size() < wgmma.size());
  CHECK(wgmma.size() < space.size());  // the tiled family is left out
  for (const auto& c : ws) CHECK((c.at("family") == "wgmma" && c.at("ws") == 1));
  // Every wgmma config with ws = 1 is kept, in the space's order.
  std::vector<nlohmann::json> expected;
  for (const auto& c : wgmma)
    if (c.value("ws", 0) == 1) expected.push_back(c);
  CHECK(ws == expected);
  CHECK_THROWS_WITH(tuner::select_configs(space, {{"ws", "1"}}), Catch::Contains("matches none of the"));
  CHECK_THROWS_WITH(tuner::select_configs(space, nlohmann::json::array()), Catch::Contains("JSON object"));
}

TEST_CASE("tuner: the winner is the fastest ok trial, or a simpler one within 1%; wrong ones are passed over",
          "[cli]") {
  using namespace qjit;
  const auto trial = [](nlohmann::json config, double us, cache::TrialStatus st = cache::TrialStatus::ok) {
    cache::TrialRecord t;
    t.config = std::move(config);
    t.median_us = us;
    t.status = st;
    return t;
  };
  std::vector<cache::TrialRecord> trials = {
      trial({{"warps", 8}, {"stages", 4}}, 10.00),                                   // fastest, complexity 32
      trial({{"warps", 4}, {"stages", 2}}, 10.09),                                   // within 1%, complexity 8
      trial({{"warps", 2}, {"stages", 2}}, 10.20),                                   // 2% slower
      trial({{"warps", 1}, {"stages", 1}}, 9.00, cache::TrialStatus::wrong_result),  // fastest, but wrong
      trial({{"baseline", "cublas_fp16_dense"}}, 8.00),                              // faster, not a kernel
  };
  const cache::TrialRecord* w = tuner::choose_winner(trials);
  REQUIRE(w != nullptr);
  CHECK(w->config == nlohmann::json{{"warps", 4}, {"stages", 2}});
  // The winner failed its repeated launches (stored as wrong_result): the rule applies to the rest,
  // so 10.00 wins over 10.20 (2% slower).
  trials[1].status = cache::TrialStatus::wrong_result;
  w = tuner::choose_winner(trials);
  REQUIRE(w != nullptr);
  CHECK(w->config == nlohmann::json{{"warps", 8}, {"stages", 4}});
  trials[0].status = cache::TrialStatus::wrong_result;
  w = tuner::choose_winner(trials);
  REQUIRE(w != nullptr);
  CHECK(w->median_us == 10.20);
  trials[2].status = cache::TrialStatus::wrong_result;
  CHECK(tuner::choose_winner(trials) == nullptr);
}

TEST_CASE("tuner: screened trials are never the winner; the rule picks among confirmed ones", "[cli]") {
  using namespace qjit;
  const auto trial = [](nlohmann::json config, double us, bool screened) {
    cache::TrialRecord t;
    t.config = std::move(config);
    t.median_us = us;
    t.status = cache::TrialStatus::ok;
    t.screened = screened;
    return t;
  };
  std::vector<cache::TrialRecord> trials = {
      trial({{"warps", 2}}, 9.0, true),    // fastest, screened only: not verified
      trial({{"warps", 8}}, 10.0, false),  // confirmed
      trial({{"warps", 4}}, 10.05, false), // confirmed, simpler, within 1%
  };
  const cache::TrialRecord* w = tuner::choose_winner(trials);
  REQUIRE(w != nullptr);
  CHECK(w->config == nlohmann::json{{"warps", 4}});
  trials.resize(1);
  CHECK(tuner::choose_winner(trials) == nullptr);
}
