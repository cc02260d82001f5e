// qjit repack: 4-bit AWQ or GPTQ checkpoint tensors → wq_gemm's native layout,
// offline and bit-exact (tuner/reference/wq_gemm.h does the unpacking and
// packing; this file reads, validates and writes files). Outputs are written
// unnamed (O_TMPFILE), fsynced, then named and renamed into place, so a killed
// run leaves neither half a file nor a temporary behind, and an output path
// may never be an input path.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include "cli/common.h"
#include "cli/repack_checkpoint.h"
#include "codegen/error.h"
#include "io/tensor_file.h"
#include "tuner/reference/wq_gemm.h"

namespace qjit::cli {
namespace {

namespace fs = std::filesystem;
namespace io = qjit::io;

constexpr int64_t kMaxDim = int64_t{1} << 20;  // wq_gemm's limit on k and n

struct Shape {
  int64_t k = 0, n = 0, g = 0;
};

// k=..,n=..,g=.. (g=k allowed for one group over all of k).
Shape parse_shape(const std::string& text) {
  const nlohmann::json kv = codegen::parse_kv_list(text);  // names a malformed item (stage "spec": exit 2)
  for (auto& [key, value] : kv.items())
    if (key != "k" && key != "n" && key != "g")
      throw Error("argument", "--shape: unknown key '" + key + "'; repack takes k, n, g");
  auto get = [&](const char* key) -> int64_t {
    if (!kv.contains(key)) throw Error("argument", std::string("--shape needs ") + key + "= (given: '" + text + "')");
    const auto& v = kv.at(key);
    if (!v.is_number_integer())
      throw Error("argument", std::string("--shape ") + key + "=" + v.get<std::string>() + " is not an integer");
    const int64_t x = v.get<int64_t>();
    if (x <= 0 || x > kMaxDim)
      throw Error("argument", std::string("--shape ") + key + "=" + std::to_string(x) + " must be in 1.." +
                                  std::to_string(kMaxDim));
    return x;
  };
  Shape s;
  s.k = get("k");
  s.n = get("n");
  if (kv.contains("g") && kv.at("g").is_string() && kv.at("g").get<std::string>() == "k") s.g = s.k;
  else s.g = get("g");
  const std::string k = std::to_string(s.k), n = std::to_string(s.n), g = std::to_string(s.g);
  if (s.n % 16) throw Error("argument", "--shape n=" + n + " is not a multiple of 16 (native tiles are 16 rows of n)");
  if (s.k % 64) throw Error("argument", "--shape k=" + k + " is not a multiple of 64 (native tiles are 64 wide in k)");
  if (s.g != 32 && s.g != 64 && s.g != 128 && s.g != s.k)
    throw Error("argument", "--shape g=" + g + "; expected 32, 64, 128 or k=" + k);
  if (s.k % s.g) throw Error("argument", "--shape k=" + k + " is not divisible by g=" + g);
  return s;
}

std::string dims(int64_t a, int64_t b) { return "[" + std::to_string(a) + ", " + std::to_string(b) + "]"; }

// Throws unless `path` is a regular file of exactly `want` bytes (`what` says what it should hold).
void expect_file_size(const std::string& option, const std::string& path, uintmax_t want, const std::string& what) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error("argument", option + " " + path + ": no such file");
  if (!fs::is_regular_file(st)) throw Error("argument", option + " " + path + ": not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw Error("io", option + " " + path + ": cannot stat: " + ec.message());
  if (size != want)
    throw Error("argument", option + " " + path + " is " + std::to_string(size) + " bytes; expected " +
                                std::to_string(want) + " (" + what + ")");
}

// A [rows][cols] int32 tensor: a raw little-endian file of exactly that many
// words, a .npy file, or a tensor of a .safetensors file (PATH:NAME), whose
// dtype and shape are checked.
std::vector<uint32_t> read_words(const std::string& option, const std::string& path, int64_t rows, int64_t cols,
                                 const std::string& what) {
  const int64_t words = rows * cols;
  std::string bytes;
  if (io::is_tensor_path(path)) {
    io::Tensor t = io::read_tensor(path);
    if (t.dtype != io::DType::i32 && t.dtype != io::DType::u32)
      throw Error("argument", option + " " + path + " holds " + io::dtype_name(t.dtype) + "; expected int32 (" + what + ")");
    if (t.shape != std::vector<int64_t>{rows, cols}) {
      std::string shape;
      for (int64_t d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      throw Error("argument", option + " " + path + " has shape [" + shape + "]; expected " + what);
    }
    bytes = std::move(t.bytes);
  } else {
    const uintmax_t want = static_cast<uintmax_t>(words) * 4;
    expect_file_size(option, path, want, what + " int32");
    bytes.resize(want);
    std::ifstream f(path, std::ios::binary);
    if (!f || !f.read(bytes.data(), static_cast<std::streamsize>(want)))
      throw Error("io", option + " " + path + ": read failed: " + std::strerror(errno));
  }
  return io::le32_words(bytes);
}

// Same file? By canonical path, and by inode when both exist (hard links).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec1, ec2;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a), ec1), cb = fs::weakly_canonical(fs::absolute(b), ec2);
  if (!ec1 && !ec2 && ca == cb) return true;
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec) && !ec;
}

// An output's bytes, written and fsynced where its name is not yet visible:
// an O_TMPFILE inode in the output's folder, which vanishes with the process
// if it is killed. publish() gives it the name "<path>.tmp.<pid>" and renames
// that over path, so the named temporary exists only between two system
// calls. Filesystems without O_TMPFILE get "<path>.tmp.<pid>" from the start.
class PendingOutput {
 public:
  PendingOutput(std::string option, std::string path) : option_(std::move(option)), path_(std::move(path)) {
    tmp_ = path_ + ".tmp." + std::to_string(getpid());
    const std::string dir = fs::absolute(path_).parent_path().string();
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      named_ = true;
    }
    if (fd_ < 0) fail("cannot create " + tmp_);
  }
  ~PendingOutput() {
    if (fd_ >= 0) ::close(fd_);
    if (named_) ::unlink(tmp_.c_str());  // not published: no temporary is left behind
  }
  PendingOutput(const PendingOutput&) = delete;
  PendingOutput& operator=(const PendingOutput&) = delete;

  void write(const unsigned char* bytes, size_t size) {
    for (size_t done = 0; done < size;) {
      const ssize_t w = ::write(fd_, bytes + done, size - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("write failed");
      done += static_cast<size_t>(w);
    }
    if (::fsync(fd_) != 0) fail("fsync failed");
  }

  void publish() {
    if (!named_) {
      const std::string proc = "/proc/self/fd/" + std::to_string(fd_);
      ::unlink(tmp_.c_str());  // a leftover of a reused pid
      if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp_.c_str(), AT_SYMLINK_FOLLOW) != 0) fail("cannot link " + tmp_);
      named_ = true;
    }
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail("close failed");
    }
    fd_ = -1;
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename from " + tmp_ + " failed");
    named_ = false;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw Error("io", option_ + " " + path_ + ": " + what + ": " + std::strerror(errno));
  }
  std::string option_, path_, tmp_;
  int fd_ = -1;
  bool named_ = false;
};

// Removes "<path>.tmp.<pid>" files that a process killed between the two
// calls of publish() (or one on a filesystem without O_TMPFILE) left, where
// that process no longer runs.
void remove_stale_temporaries(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  if (ec) return;
  const std::string prefix = p.filename().string() + ".tmp.";
  for (const auto& e : fs::directory_iterator(p.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

void fsync_dir_of(const std::string& path) {  // best effort: make the rename itself durable
  fs::path dir = fs::absolute(path).parent_path();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// --checkpoint: convert every layer, then write the output and the manifest
// (each through a temporary and a rename).
void repack_whole(const std::string& checkpoint, const std::string& config, const std::string& from, bool sym, bool v1,
                  const std::string& out, const std::string& manifest, bool json, bool single_layer_options) {
  if (single_layer_options)
    throw Error("argument", "--checkpoint converts every layer; --shape, --qweight, --qzeros, --scales, --out-qweight "
                            "and --out-zeros are for one layer");
  if (out.empty()) throw Error("argument", "--checkpoint needs --out FILE.safetensors");
  for (const auto& [option, path] : {std::pair<const char*, const std::string&>{"--out", out}, {"--manifest", manifest}})
    if (!path.empty() && same_file(path, checkpoint))
      throw Error("argument", std::string(option) + " " + path + " is the input --checkpoint; refusing to overwrite it");
  if (!manifest.empty() && same_file(out, manifest)) throw Error("argument", "--out and --manifest are the same file " + out);
  const CheckpointRepack r = repack_checkpoint({checkpoint, config, from, sym, v1});
  io::write_safetensors(out, r.tensors, {{"format", "qjit-native"}, {"from", r.from}});
  if (!manifest.empty()) {
    std::string lines;
    for (const auto& m : r.manifest) lines += m.dump() + "\n";
    remove_stale_temporaries(manifest);
    PendingOutput pending("--manifest", manifest);
    pending.write(reinterpret_cast<const unsigned char*>(lines.data()), lines.size());
    pending.publish();
    fsync_dir_of(manifest);
  }
  if (json) {
    std::cout << nlohmann::json{{"from", r.from}, {"layers", r.layers}, {"carried", r.carried}, {"out", out}, {"manifest", manifest},
                                {"specs", r.manifest}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "repacked " << r.layers << " " << r.from << " layers of " << checkpoint << " (and carried "
            << r.carried << " other tensors unchanged) -> " << out << "\n";
  for (const auto& m : r.manifest)
    std::cout << "  wq_gemm " << m["shape"].get<std::string>() << "  (" << m["layers"].size() << " layers)\n";
  if (!manifest.empty()) std::cout << "specs to tune: " << manifest << "\n";
}

}  // namespace

void add_repack(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("repack", "convert 4-bit AWQ or GPTQ checkpoint tensors to wq_gemm's native layout");
  cmd->footer(std::string(
                  "Inputs are int32 tensors: raw little-endian files, .npy files, or tensors of a .safetensors\n"
                  "checkpoint named as FILE.safetensors:TENSOR (e.g. model.safetensors:model.layers.0.mlp.up_proj.qweight):\n"
                  "  awq:  qweight [K, N/8], qzeros [K/g, N/8]\n"
                  "  gptq: qweight [K/8, N], qzeros [K/g, N/8] (not read with --sym: every zero is 8)\n"
                  "Outputs: the native qweight as raw uint32 words (bits=4), and, unless --sym, the zero points\n"
                  "as one byte per group and column [K/g][N] (wq_gemm zero=int). Scales are not touched: wq_gemm\n"
                  "takes scales [K/g][N] exactly as awq/gptq store them, so pass the checkpoint's scales as they are\n"
                  "(--scales checks their length against the shape before anything is written).\n"
                  "qzeros nibbles are read as the zero points themselves (as awq_dequant layout=gptq reads them;\n"
                  "GPTQ's checkpoint_format gptq_v2), or with --gptq-v1 as zero - 1 (the original GPTQ format:\n"
                  "w = (q - (nibble + 1))·s, zero points 1..16, which the one-byte zeros hold exactly);\n"
                  "GPTQ checkpoints with act-order (a g_idx other than k/g) are not supported.\n"
                  "Needs n % 16 == 0, k % 64 == 0, g in {32, 64, 128, k}. Outputs are written whole and fsynced\n"
                  "before they take their names, so a killed run leaves no partial file; an output path may not\n"
                  "be an input path. No GPU needed.\n"
                  "A whole checkpoint at once: --checkpoint MODEL.safetensors --out NATIVE.safetensors [--manifest\n"
                  "SPECS.jsonl] [--config config.json | --from awq|gptq]: every PREFIX.qweight/.qzeros/.scales layer,\n"
                  "K, N and g read from the tensors' shapes (and checked against quantization_config), written as\n"
                  "PREFIX.qweight (native uint32), PREFIX.zeros (uint8 [K/g][N]) and PREFIX.scales; the manifest\n"
                  "lists each distinct wq_gemm spec with its layers.\n") +
              kExitCodesHelp);
  struct Opts {
    std::string from, shape, qweight, qzeros, scales, out_qweight, out_zeros;
    std::string checkpoint, config, out, manifest;
    bool sym = false, v1 = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--from", o->from, "layout of the inputs: awq or gptq (with --checkpoint: or from --config)");
  cmd->add_option("--shape", o->shape, "k=IN_FEATURES,n=OUT_FEATURES,g=GROUP e.g. k=4096,n=11008,g=128");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "a whole .safetensors checkpoint: every PREFIX.qweight/.qzeros/.scales layer (with --out, --manifest)");
  cmd->add_option("--config", o->config, "with --checkpoint: its config.json (quant_method, bits, group_size, sym, "
                                         "checkpoint_format are read from quantization_config)");
  cmd->add_option("--out", o->out, "with --checkpoint: the output .safetensors (native qweight, zeros, scales per layer)");
  cmd->add_option("--manifest", o->manifest, "with --checkpoint: the wq_gemm specs to tune, one JSON line each");
  cmd->add_flag("--sym", o->sym, "gptq symmetric: every zero point is 8 (no --qzeros, no --out-zeros; zero=sym)");
  auto* qweight_option = cmd->add_option("--qweight", o->qweight, "input qweight (raw int32, .npy, or FILE.safetensors:NAME)");
  cmd->add_option("--qzeros", o->qzeros, "input qzeros (as --qweight); required unless --sym");
  cmd->add_option("--scales", o->scales, "the checkpoint's scales (fp16 or bf16 [K/g][N], raw, .npy or .safetensors:NAME): only checked");
  auto* out_qweight_option = cmd->add_option("--out-qweight", o->out_qweight, "output: native qweight (raw uint32)");
  cmd->add_option("--out-zeros", o->out_zeros, "output: zero points, one byte each [K/g][N]; required unless --sym");
  cmd->add_flag("--gptq-v1", o->v1, "gptq qzeros store zero - 1 (checkpoint_format gptq, not gptq_v2)");
  cmd->add_flag("--json", o->json, "JSON output");
  cmd->callback([o, &rc, qweight_option, out_qweight_option] {
    if (!o->checkpoint.empty()) {
      repack_whole(o->checkpoint, o->config, o->from, o->sym, o->v1, o->out, o->manifest, o->json,
                   !o->shape.empty() || !o->qweight.empty() || !o->qzeros.empty() || !o->scales.empty() ||
                       !o->out_qweight.empty() || !o->out_zeros.empty());
      rc = kOk;
      return;
    }
    for (const auto& [option, value] : {std::pair<const char*, const std::string&>{"--config", o->config},
                                        {"--out", o->out}, {"--manifest", o->manifest}})
      if (!value.empty()) throw Error("argument", std::string(option) + " goes with --checkpoint");
    if (o->shape.empty()) throw Error("argument", "repack needs --shape (one layer) or --checkpoint (all of them)");
    // (Given but empty is named below as an empty path.)
    if (qweight_option->count() == 0) throw Error("argument", "repack --shape needs --qweight");
    if (out_qweight_option->count() == 0) throw Error("argument", "repack --shape needs --out-qweight");
    if (o->from != "awq" && o->from != "gptq")
      throw Error("argument", "--from '" + o->from + "' (expected awq or gptq)");
    if (o->sym && o->from != "gptq")
      throw Error("argument", "--sym is for gptq (symmetric, every zero is 8); awq checkpoints carry qzeros");
    if (o->v1 && o->from != "gptq") throw Error("argument", "--gptq-v1 is for --from gptq; awq qzeros hold the zeros");
    if (o->v1 && o->sym) throw Error("argument", "--gptq-v1 reads qzeros; --sym reads none (every zero is 8)");
    for (const auto& [option, path] : {std::pair<const char*, const std::string&>{"--qweight", o->qweight},
                                       {"--out-qweight", o->out_qweight}})
      if (path.empty()) throw Error("argument", std::string(option) + " is an empty path");
    const Shape s = parse_shape(o->shape);
    if (o->sym) {
      if (!o->qzeros.empty()) throw Error("argument", "--qzeros " + o->qzeros + " is not read with --sym (every zero is 8)");
      if (!o->out_zeros.empty())
        throw Error("argument", "--out-zeros " + o->out_zeros + ": no zeros file is written with --sym (use zero=sym)");
    } else {
      if (o->qzeros.empty()) throw Error("argument", "--from " + o->from + " needs --qzeros (or --sym for symmetric gptq)");
      if (o->out_zeros.empty()) throw Error("argument", "--out-zeros is required unless --sym");
    }

    const std::string zero = o->sym ? "sym" : "int";
    const std::string wq = fmt("k=%lld,n=%lld,g=%lld,bits=4,zero=%s", static_cast<long long>(s.k),
                               static_cast<long long>(s.n), static_cast<long long>(s.g), zero.c_str());
    codegen::parse_spec("wq_gemm", wq);  // the spec printed at the end is one wq_gemm accepts

    // No output may be an input, nor the other output.
    std::vector<std::pair<std::string, std::string>> inputs = {{"--qweight", io::file_of(o->qweight)}};
    if (!o->qzeros.empty()) inputs.push_back({"--qzeros", io::file_of(o->qzeros)});
    if (!o->scales.empty()) inputs.push_back({"--scales", io::file_of(o->scales)});
    std::vector<std::pair<std::string, std::string>> outputs = {{"--out-qweight", o->out_qweight}};
    if (!o->out_zeros.empty()) outputs.push_back({"--out-zeros", o->out_zeros});
    for (auto& [oname, opath] : outputs)
      for (auto& [iname, ipath] : inputs)
        if (same_file(opath, ipath))
          throw Error("argument", oname + " " + opath + " is the input " + iname + " " + ipath +
                                      "; refusing to overwrite an input");
    if (outputs.size() == 2 && same_file(outputs[0].second, outputs[1].second))
      throw Error("argument", "--out-qweight and --out-zeros are the same file " + o->out_zeros);

    // Read (sizes checked exactly), convert.
    const bool awq = o->from == "awq";
    const std::string qw_what = awq ? "awq qweight " + dims(s.k, s.n / 8) : "gptq qweight " + dims(s.k / 8, s.n);
    const std::string qz_what = o->from + " qzeros " + dims(s.k / s.g, s.n / 8);
    const auto qweight = awq ? read_words("--qweight", o->qweight, s.k, s.n / 8, qw_what)
                             : read_words("--qweight", o->qweight, s.k / 8, s.n, qw_what);
    std::vector<uint32_t> qzeros;
    if (!o->sym) qzeros = read_words("--qzeros", o->qzeros, s.k / s.g, s.n / 8, qz_what);
    if (!o->scales.empty()) {
      const std::string want = "scales " + dims(s.k / s.g, s.n) + " of 2 bytes each";
      if (io::is_tensor_path(o->scales)) {
        const io::Tensor t = io::read_tensor(o->scales);
        if ((t.dtype != io::DType::f16 && t.dtype != io::DType::bf16) || t.shape != std::vector<int64_t>{s.k / s.g, s.n})
          throw Error("argument", "--scales " + o->scales + " is " + io::dtype_name(t.dtype) + " of " +
                                      std::to_string(t.elements()) + " elements; expected " + want);
      } else {
        expect_file_size("--scales", o->scales, static_cast<uintmax_t>((s.k / s.g) * s.n) * 2, want);
      }
    }
    tuner::PlainQuant p = awq ? tuner::unpack_awq(qweight, qzeros, s.k, s.n, s.g)
                              : tuner::unpack_gptq(qweight, qzeros, s.k, s.n, s.g, o->sym);
    p.bits = 4;
    // Original GPTQ checkpoints store zero - 1 (vLLM PR #26092/#38966 describe
    // both formats: v1 w = (q - (stored + 1))·s, v2 w = (q - stored)·s).
    if (o->v1)
      for (auto& z : p.z) z = static_cast<uint8_t>(z + 1);
    const std::vector<uint32_t> native = tuner::pack_native(p);

    const std::string qbytes = io::le32_bytes(native);

    // Write both outputs first, then publish them: no output is ever half written.
    for (auto& [oname, opath] : outputs) remove_stale_temporaries(opath);
    PendingOutput out_q("--out-qweight", o->out_qweight);
    out_q.write(reinterpret_cast<const unsigned char*>(qbytes.data()), qbytes.size());
    std::unique_ptr<PendingOutput> out_z;
    if (!o->sym) {
      out_z = std::make_unique<PendingOutput>("--out-zeros", o->out_zeros);
      out_z->write(p.z.data(), p.z.size());
    }
    out_q.publish();
    fsync_dir_of(o->out_qweight);
    if (out_z) {
      out_z->publish();
      fsync_dir_of(o->out_zeros);
    }

    if (o->json) {
      nlohmann::json j = {{"from", o->from},
                          {"sym", o->sym},
                          {"gptq_v1", o->v1},
                          {"k", s.k},
                          {"n", s.n},
                          {"g", s.g},
                          {"bits", 4},
                          {"zero", zero},
                          {"layout", "native"},
                          {"wq_gemm", "wq_gemm " + wq},
                          {"scales", "unchanged [K/g][N]"},
                          {"qweight", o->qweight},
                          {"qzeros", o->sym ? nlohmann::json(nullptr) : nlohmann::json(o->qzeros)},
                          {"out_qweight", o->out_qweight},
                          {"out_qweight_bytes", qbytes.size()},
                          {"out_zeros", o->sym ? nlohmann::json(nullptr) : nlohmann::json(o->out_zeros)},
                          {"out_zeros_bytes", o->sym ? nlohmann::json(nullptr) : nlohmann::json(p.z.size())}};
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << "repacked " << qw_what << (o->sym ? " (symmetric)" : " + qzeros " + dims(s.k / s.g, s.n / 8))
                << " -> native qweight " << o->out_qweight
                << " (" << human_bytes(static_cast<double>(qbytes.size())) << ")";
      if (!o->sym) std::cout << ", zeros " << o->out_zeros << " (" << human_bytes(static_cast<double>(p.z.size())) << ")";
      std::cout << "\n";
      if (o->sym) std::cout << "no zeros file written: wq_gemm should use zero=sym (every zero is 8)\n";
      std::cout << "use: wq_gemm " << wq << " (scales [K/g][N] unchanged)\n";
    }
    rc = kOk;
  });
}

}  // namespace qjit::cli
