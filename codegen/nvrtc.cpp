#include "codegen/nvrtc.h"
#include <nvrtc.h>
#include <chrono>
#include <iterator>
#include <regex>
#include <vector>
#include "codegen/error.h"

namespace qjit::codegen {
namespace {

#define QJIT_NVRTC(call)                                                                       \
  do {                                                                                         \
    nvrtcResult r_ = (call);                                                                   \
    if (r_ != NVRTC_SUCCESS)                                                                   \
      throw Error("nvrtc", std::string(#call) + " failed: " + nvrtcGetErrorString(r_) + " [" + \
                               __FILE__ + ":" + std::to_string(__LINE__) + "]");             \
  } while (0)

struct ProgramGuard {
  nvrtcProgram p = nullptr;
  ~ProgramGuard() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

// Appends "[template file:line]" to each "name.cu(LINE):" NVRTC reports, so an
// error in generated code points at the template line that produced it.
std::string annotate_log(const std::string& log, const GeneratedSource& src) {
  std::regex re(std::regex_replace(src.file_name, std::regex(R"([.])"), R"(\.)") + R"(\((\d+)\): )");
  std::string out;
  std::string::const_iterator from = log.begin();
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    out.append(from, (*it)[0].second);
    out += "[" + src.origin_of_line(std::stoi((*it)[1].str())) + "] ";
    from = (*it)[0].second;
  }
  out.append(from, log.end());
  return out;
}

int match_int(const std::string& log, const char* pattern) {
  std::smatch m;
  if (std::regex_search(log, m, std::regex(pattern))) return std::stoi(m[1].str());
  return -1;
}

}  // namespace

bool nvrtc_supports_arch(const std::string& arch) {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS) return false;
  std::vector<int> archs(n);
  nvrtcGetSupportedArchs(archs.data());
  std::smatch m;
  if (!std::regex_match(arch, m, std::regex(R"(sm_(\d{1,4})a?)"))) return false;  // (no stoi overflow)
  for (int a : archs)
    if (a == std::stoi(m[1].str())) return true;
  return false;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  QJIT_NVRTC(nvrtcVersion(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {
// The options of every compile besides -arch (see compile()).
constexpr const char* kOptions[] = {"-std=c++17", "-default-device", "-Xptxas=-v", "-lineinfo", "--no-cache"};
static_assert(std::size(kOptions) == 5, "compile() passes each option by index");
}  // namespace

std::string compile_identity() {
  std::string id = "nvrtc " + nvrtc_version() + "\n";
  for (const char* o : kOptions) id += std::string(o) + "\n";
  for (const auto& [name, text] : nvrtc_headers()) id += name + "\n" + std::to_string(text.size()) + "\n" + text;
  return id;
}

CompileResult compile(const GeneratedSource& src, const std::string& arch) {
  if (!nvrtc_supports_arch(arch))
    throw Error("nvrtc", "NVRTC " + nvrtc_version() + " cannot compile for '" + arch +
                             "' (expected sm_XX, e.g. sm_80 or sm_90)");
  const auto& headers = nvrtc_headers();
  std::vector<const char*> names, texts;
  for (const auto& [name, text] : headers) {
    names.push_back(name.c_str());
    texts.push_back(text.c_str());
  }
  if (src.arch_need.compute_capability > 0) {
    // "sm_89", "sm_90a", "sm_100": the digits are major·10 + minor.
    const int cc = std::stoi(std::regex_replace(arch, std::regex(R"(^sm_(\d+)a?$)"), "$1"));
    if (cc < src.arch_need.compute_capability)
      throw Error("spec", src.arch_need.why + ": it needs sm_" + std::to_string(src.arch_need.compute_capability) +
                              " or newer, not " + arch);
  }
  if (src.needs_sm90a && arch != "sm_90")
    throw Error("nvrtc", src.template_path + " uses sm_90a instructions (wgmma, thread-block clusters): it runs on compute capability 9.0 only, not " + arch);
  const std::string arch_opt = "-arch=" + (src.needs_sm90a ? std::string("sm_90a") : arch);
  // -Xptxas=-v puts registers/spills/smem in the log: static pruning needs no GPU.
  // No fast-math: the CPU reference defines the arithmetic (DESIGN.md numerics).
  // --no-cache: NVRTC 12.9+ keeps its own disk cache (~/.nv/ComputeCache) where a
  // driver is installed; a hit skips ptxas and with it the -v resource report,
  // so registers/spills would be unknown. qjit caches kernels itself.
  const char* opts[] = {arch_opt.c_str(), kOptions[0], kOptions[1], kOptions[2], kOptions[3], kOptions[4]};

  ProgramGuard prog;
  QJIT_NVRTC(nvrtcCreateProgram(&prog.p, src.text.c_str(), src.file_name.c_str(), static_cast<int>(names.size()),
                                texts.data(), names.data()));
  CompileResult res;
  res.arch = arch;
  auto t0 = std::chrono::steady_clock::now();
  nvrtcResult rc = nvrtcCompileProgram(prog.p, static_cast<int>(std::size(opts)), opts);
  res.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  size_t n = 0;
  QJIT_NVRTC(nvrtcGetProgramLogSize(prog.p, &n));
  std::string log(n, '\0');
  QJIT_NVRTC(nvrtcGetProgramLog(prog.p, log.data()));
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  res.log = annotate_log(log, src);
  if (rc != NVRTC_SUCCESS) {
    if (rc != NVRTC_ERROR_COMPILATION) QJIT_NVRTC(rc);
    return res;
  }
  QJIT_NVRTC(nvrtcGetCUBINSize(prog.p, &n));
  res.cubin.resize(n);
  QJIT_NVRTC(nvrtcGetCUBIN(prog.p, res.cubin.data()));
  QJIT_NVRTC(nvrtcGetPTXSize(prog.p, &n));
  res.ptx.resize(n);
  QJIT_NVRTC(nvrtcGetPTX(prog.p, res.ptx.data()));
  while (!res.ptx.empty() && res.ptx.back() == '\0') res.ptx.pop_back();
  res.registers = match_int(log, R"(Used (\d+) registers)");
  if (res.registers >= 0) {  // no ptxas report: leave every figure at -1 ("not reported"), never claim 0 spills
    res.spill_bytes = std::max(match_int(log, R"((\d+) bytes spill stores)"), 0) +
                      std::max(match_int(log, R"((\d+) bytes spill loads)"), 0);
    res.shared_bytes = std::max(match_int(log, R"((\d+) bytes smem)"), 0);
    res.stack_bytes = match_int(log, R"((\d+) bytes stack frame)");
  }
  res.ok = !res.cubin.empty();
  return res;
}

}  // namespace qjit::codegen
