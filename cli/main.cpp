// The qjit command: parses arguments with CLI11 and dispatches to cli/cmd_*.cpp.
// Errors are printed as "qjit: <stage>: <message>" with an exit code from
// cli/common.h; --help on every command.
#include <iostream>
#include "cli/common.h"
#include "codegen/error.h"

int main(int argc, char** argv) {
  using namespace qjit::cli;
  CLI::App app{"qjit: JIT kernel generator and autotuner for quantized inference on NVIDIA GPUs.\n" +
               std::string(kExitCodesHelp)};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("qjit ") + QJIT_VERSION);
  int rc = kOk;
  add_tune(app, rc);
  add_bench(app, rc);
  add_source(app, rc);
  add_list(app, rc);
  add_show(app, rc);
  add_doctor(app, rc);
  add_export(app, rc);
  add_import(app, rc);
  add_lut(app, rc);
  add_repack(app, rc);
  add_gru(app, rc);
  add_w8a8(app, rc);
  add_ops(app, rc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  } catch (const qjit::Error& e) {
    std::cerr << "qjit: " << e.what() << "\n";
    if (!e.detail().empty()) std::cerr << e.detail() << "\n";
    const std::string& s = e.stage();
    if (s == "spec" || s == "config" || s == "argument") return kUsage;
    if (s == "no_device") return kNoGpu;
    return kFailed;
  } catch (const std::exception& e) {
    std::cerr << "qjit: internal error: " << e.what() << "\n";
    return kFailed;
  }
  return rc;
}
