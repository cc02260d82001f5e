#include "cache/record.h"
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/registry.h"

namespace qjit::cache {

KernelRecord make_record(const Fingerprint& fp, const nlohmann::json& config, codegen::GeneratedSource src,
                         codegen::CompileResult res, bool tuned) {
  KernelRecord rec;
  rec.fp = fp;
  rec.config = config;
  rec.tuned = tuned;
  rec.kernel_name = src.kernel_name;
  rec.cubin = std::move(res.cubin);
  rec.ptx = std::move(res.ptx);
  rec.source = std::move(src.text);
  rec.compile_log = std::move(res.log);
  rec.registers = res.registers;
  rec.spill_bytes = res.spill_bytes;
  rec.shared_bytes = res.shared_bytes;
  return rec;
}

KernelRecord build_record(const Fingerprint& fp, const codegen::OpSpec& spec, const nlohmann::json& config,
                          const std::string& arch, bool tuned) {
  auto src = codegen::generate_source(spec, config);
  auto res = codegen::compile(src, arch);
  if (!res.ok) throw Error("nvrtc", "compiling " + spec.label() + " config " + config.dump() + " failed", res.log);
  return make_record(fp, config, std::move(src), std::move(res), tuned);
}

void dump_if_requested(const KernelRecord& rec) {
  const char* dir = std::getenv("QJIT_DUMP_DIR");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string base = std::string(dir) + "/" + rec.fp.op + "_" + rec.key().substr(0, 12);
  std::ofstream(base + ".cu") << rec.source;
  std::ofstream(base + ".ptx") << rec.ptx;
  std::ofstream(base + ".log") << rec.compile_log;
}

RecordLine parse_record_line(std::string_view line) {
  nlohmann::json j = parse_json_input(line, "the record", "import");
  if (!j.is_object() || !j.contains("format") || j["format"] != kRecordFormat)
    throw Error("import", std::string("not a ") + kRecordFormat + " record: " + excerpt(line));
  if (!j.contains("spec") || !j.contains("config")) throw Error("import", "the record has no spec or no config");
  codegen::OpSpec spec = codegen::spec_from_json(j["spec"]);
  codegen::find_op(spec.op).validate_config(spec, j["config"]);
  nlohmann::json config = j["config"];
  return {std::move(spec), std::move(config), std::move(j)};
}

}  // namespace qjit::cache
