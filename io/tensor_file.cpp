#include "io/tensor_file.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::io {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what, const std::string& why) { throw Error("io", what + ": " + why); }

// Elements of a shape, or -1 past 2^62 (no overflow on hostile shapes).
int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > (int64_t{1} << 62) / d) return -1;
    n *= d;
  }
  return n;
}

struct NpyType {
  const char* descr;
  DType type;
};
// '<' little-endian, '|' no byte order (one byte); '=' is native, little on every GPU host.
constexpr NpyType kNpyTypes[] = {{"i1", DType::i8},  {"u1", DType::u8},  {"i2", DType::i16}, {"u2", DType::u16},
                                 {"i4", DType::i32}, {"u4", DType::u32}, {"i8", DType::i64}, {"u8", DType::u64},
                                 {"f2", DType::f16}, {"f4", DType::f32}, {"f8", DType::f64}, {"b1", DType::boolean}};

struct StType {
  const char* name;
  DType type;
};
constexpr StType kStTypes[] = {{"I8", DType::i8},   {"U8", DType::u8},   {"I16", DType::i16}, {"U16", DType::u16},
                               {"I32", DType::i32}, {"U32", DType::u32}, {"I64", DType::i64}, {"U64", DType::u64},
                               {"F16", DType::f16}, {"BF16", DType::bf16}, {"F32", DType::f32}, {"F64", DType::f64},
                               {"BOOL", DType::boolean}};

uint64_t read_le(std::string_view s, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
  return v;
}

// The value after `'key':` in a .npy header dict, up to the next top-level comma or brace.
std::string_view dict_value(std::string_view header, std::string_view key, const std::string& what) {
  const std::string quoted[] = {"'" + std::string(key) + "'", "\"" + std::string(key) + "\""};
  size_t at = std::string_view::npos;
  for (const auto& q : quoted)
    if ((at = header.find(q)) != std::string_view::npos) {
      at += q.size();
      break;
    }
  if (at == std::string_view::npos) fail(what, "the .npy header has no '" + std::string(key) + "'");
  at = header.find(':', at);
  if (at == std::string_view::npos) fail(what, "malformed .npy header");
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  size_t end = at;
  int depth = 0;
  while (end < header.size() && (depth > 0 || (header[end] != ',' && header[end] != '}'))) {
    if (header[end] == '(') ++depth;
    if (header[end] == ')') --depth;
    ++end;
  }
  return header.substr(at, end - at);
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(path, "is a folder, not a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot read (") + std::strerror(errno) + ")");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail(path, "read failed");
  return s;
}

void write_file(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      fail(path, "cannot write");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(path, std::string("cannot rename into place (") + std::strerror(errno) + ")");
  }
}

// "a.safetensors:name" -> {"a.safetensors", "name"}; the name may hold ':' too.
std::pair<std::string, std::string> split_tensor_path(const std::string& path) {
  const size_t ext = path.find(".safetensors:");
  if (ext == std::string::npos) return {path, ""};
  return {path.substr(0, ext + 12), path.substr(ext + 13)};
}

}  // namespace

size_t dtype_size(DType t) {
  switch (t) {
    case DType::i8: case DType::u8: case DType::boolean: return 1;
    case DType::i16: case DType::u16: case DType::f16: case DType::bf16: return 2;
    case DType::i32: case DType::u32: case DType::f32: return 4;
    case DType::i64: case DType::u64: case DType::f64: return 8;
  }
  return 1;
}

std::string dtype_name(DType t) {
  switch (t) {
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
    case DType::i16: return "int16";
    case DType::u16: return "uint16";
    case DType::i32: return "int32";
    case DType::u32: return "uint32";
    case DType::i64: return "int64";
    case DType::u64: return "uint64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::boolean: return "bool";
  }
  return "?";
}

int64_t Tensor::elements() const { return product(shape); }

std::vector<uint32_t> le32_words(std::string_view bytes) {
  std::vector<uint32_t> w(bytes.size() / 4);
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = uint32_t{b[4 * i]} | uint32_t{b[4 * i + 1]} << 8 | uint32_t{b[4 * i + 2]} << 16 | uint32_t{b[4 * i + 3]} << 24;
  return w;
}

std::string le32_bytes(const std::vector<uint32_t>& words) {
  std::string out(words.size() * 4, '\0');
  for (size_t i = 0; i < words.size(); ++i)
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<char>(words[i] >> (8 * b));
  return out;
}

Tensor parse_npy(std::string_view file, const std::string& what) {
  // Format: "\x93NUMPY", major, minor, header length (2 bytes in 1.x, 4 in
  // 2.x/3.x), then a Python dict literal padded with spaces and '\n'.
  if (file.size() < 10 || file.substr(0, 6) != "\x93NUMPY") fail(what, "not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(file[6]);
  if (major < 1 || major > 3) fail(what, ".npy format version " + std::to_string(major) + " (expected 1, 2 or 3)");
  const size_t len_bytes = major == 1 ? 2 : 4, start = 8 + len_bytes;
  if (file.size() < start) fail(what, "truncated .npy header");
  const uint64_t header_len = read_le(file.substr(8), len_bytes);
  if (header_len > file.size() - start) fail(what, "the .npy header runs past the end of the file");
  const std::string_view header = file.substr(start, header_len);

  std::string_view descr = dict_value(header, "descr", what);
  if (descr.size() < 3 || (descr.front() != '\'' && descr.front() != '"') || descr.back() != descr.front())
    fail(what, "unsupported .npy descr " + excerpt(descr, 40));
  descr = descr.substr(1, descr.size() - 2);
  if (descr.empty()) fail(what, "empty .npy descr");
  if (descr[0] == '>') fail(what, "big-endian data ('" + std::string(descr) + "'); save it little-endian");
  if (descr[0] != '<' && descr[0] != '|' && descr[0] != '=') fail(what, "unsupported .npy descr '" + excerpt(descr, 40) + "'");
  Tensor t;
  bool known = false;
  for (const auto& n : kNpyTypes)
    if (descr.substr(1) == n.descr) t.dtype = n.type, known = true;
  if (!known) fail(what, "unsupported .npy dtype '" + excerpt(descr, 40) + "'");

  const std::string_view fortran = dict_value(header, "fortran_order", what);
  if (fortran.substr(0, 4) == "True") fail(what, "Fortran-order data; save it C-contiguous");
  if (fortran.substr(0, 5) != "False") fail(what, "malformed fortran_order " + excerpt(fortran, 20));

  const std::string_view shape = dict_value(header, "shape", what);
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') fail(what, "malformed .npy shape " + excerpt(shape, 40));
  for (size_t i = 1; i + 1 < shape.size();) {
    while (i + 1 < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i + 1 >= shape.size()) break;
    size_t j = i;
    while (j + 1 < shape.size() && std::isdigit(static_cast<unsigned char>(shape[j]))) ++j;
    if (j == i || j - i > 15) fail(what, "malformed .npy shape " + excerpt(shape, 40));
    t.shape.push_back(std::stoll(std::string(shape.substr(i, j - i))));
    if (t.shape.size() > 16) fail(what, "a .npy shape of more than 16 dimensions");
    i = j;
  }
  const int64_t n = product(t.shape);
  if (n < 0 || static_cast<uint64_t>(n) > std::numeric_limits<uint64_t>::max() / 8) fail(what, "the .npy shape is too large");
  const uint64_t data = static_cast<uint64_t>(n) * dtype_size(t.dtype);
  if (file.size() - start - header_len != data)
    fail(what, "holds " + std::to_string(file.size() - start - header_len) + " bytes of data; its header says " +
                   std::to_string(data));
  t.bytes = std::string(file.substr(start + header_len));
  return t;
}

std::string npy_bytes(const Tensor& t) {
  const char* descr = nullptr;
  for (const auto& n : kNpyTypes)
    if (n.type == t.dtype) descr = n.descr;
  if (!descr) fail("npy", dtype_name(t.dtype) + " has no .npy type");
  std::string shape = "(";
  for (size_t i = 0; i < t.shape.size(); ++i) shape += std::to_string(t.shape[i]) + (t.shape.size() == 1 ? "," : i + 1 < t.shape.size() ? ", " : "");
  shape += ")";
  const char order = dtype_size(t.dtype) == 1 ? '|' : '<';
  std::string header = std::string("{'descr': '") + order + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const bool v2 = header.size() + 11 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  header.append(63 - (prefix + header.size()) % 64, ' ');  // total a multiple of 64, '\n' last
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + t.bytes;
}

SafetensorsHeader parse_safetensors_header(std::string_view file_start, uint64_t file_size, const std::string& what) {
  if (file_start.size() < 8 || file_size < 8) fail(what, "not a .safetensors file (shorter than its 8-byte header length)");
  const uint64_t n = read_le(file_start, 8);
  if (n > file_size - 8) fail(what, "the header length " + std::to_string(n) + " runs past the end of the file");
  if (n > (uint64_t{100} << 20)) fail(what, "a header of " + std::to_string(n) + " bytes (over 100 MB)");
  if (file_start.size() < 8 + n) fail(what, "truncated header");
  const nlohmann::json j = parse_json_input(file_start.substr(8, n), what + " header", "io");
  if (!j.is_object()) fail(what, "the header is not a JSON object");
  SafetensorsHeader h;
  const uint64_t data_start = 8 + n, data_size = file_size - data_start;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      h.metadata = v;
      continue;
    }
    const std::string where = what + " tensor '" + excerpt(name, 60) + "'";
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      fail(where, "needs dtype, shape and data_offsets [begin, end]");
    TensorEntry e;
    bool known = false;
    for (const auto& s : kStTypes)
      if (v["dtype"] == s.name) e.dtype = s.type, known = true;
    if (!known) fail(where, "unsupported dtype " + json_excerpt(v["dtype"], 20));
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) fail(where, "bad shape " + json_excerpt(v["shape"], 60));
      e.shape.push_back(d.get<int64_t>());
    }
    for (const auto& o : v["data_offsets"])
      if (!o.is_number_unsigned()) fail(where, "bad data_offsets " + json_excerpt(v["data_offsets"], 60));
    const uint64_t b = v["data_offsets"][0].get<uint64_t>(), en = v["data_offsets"][1].get<uint64_t>();
    const int64_t count = product(e.shape);
    if (b > en || en > data_size) fail(where, "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] lie outside the " + std::to_string(data_size) + " bytes of data");
    if (count < 0 || static_cast<uint64_t>(count) > (en - b) / dtype_size(e.dtype) ||
        static_cast<uint64_t>(count) * dtype_size(e.dtype) != en - b)
      fail(where, "shape and dtype need a different byte count than data_offsets give");
    e.begin = data_start + b, e.end = data_start + en;
    h.tensors[name] = std::move(e);
  }
  return h;
}

std::string safetensors_bytes(const std::map<std::string, Tensor>& tensors, const nlohmann::json& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::string data;
  for (const auto& [name, t] : tensors) {
    const char* dtype = nullptr;
    for (const auto& s : kStTypes)
      if (s.type == t.dtype) dtype = s.name;
    header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
    data += t.bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

std::string file_of(const std::string& path) { return split_tensor_path(path).first; }

bool is_tensor_path(const std::string& path) {
  const std::string file = split_tensor_path(path).first;
  auto ends = [&](const char* ext) {
    const size_t n = std::strlen(ext);
    return file.size() >= n && file.compare(file.size() - n, n, ext) == 0;
  };
  return ends(".npy") || ends(".safetensors");
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(path, "is a folder, not a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot read (") + std::strerror(errno) + ")");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot stat: " + ec.message());
  std::string start(8, '\0');
  if (!f.read(start.data(), 8)) fail(path, "not a .safetensors file (shorter than 8 bytes)");
  const uint64_t n = read_le(start, 8);
  if (n > size - 8 || n > (uint64_t{100} << 20)) return parse_safetensors_header(start, size, path);  // names the problem
  start.resize(8 + n);
  if (!f.read(start.data() + 8, static_cast<std::streamsize>(n))) fail(path, "truncated header");
  return parse_safetensors_header(start, size, path);
}

Tensor read_tensor(const std::string& path) {
  const auto [file, name] = split_tensor_path(path);
  if (file.size() >= 4 && file.compare(file.size() - 4, 4, ".npy") == 0) return parse_npy(read_file(file), file);
  if (!(file.size() >= 12 && file.compare(file.size() - 12, 12, ".safetensors") == 0))
    fail(path, "not a .npy or .safetensors path");
  const SafetensorsHeader h = read_safetensors_header(file);
  std::string chosen = name;
  if (chosen.empty()) {
    if (h.tensors.size() != 1)
      fail(file, "holds " + std::to_string(h.tensors.size()) + " tensors; name one as " + file + ":NAME");
    chosen = h.tensors.begin()->first;
  }
  const auto it = h.tensors.find(chosen);
  if (it == h.tensors.end()) fail(file, "has no tensor '" + chosen + "'");
  const TensorEntry& e = it->second;
  Tensor t{e.dtype, e.shape, std::string(e.end - e.begin, '\0')};
  std::ifstream f(file, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(e.begin));
  if (!f.read(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()))) fail(file, "cannot read tensor '" + chosen + "'");
  return t;
}

void write_npy(const std::string& path, const Tensor& t) { write_file(path, npy_bytes(t)); }

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const nlohmann::json& metadata) {
  write_file(path, safetensors_bytes(tensors, metadata));
}

}  // namespace qjit::io
