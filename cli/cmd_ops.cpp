// qjit ops: every op's description as codegen's OpDef gives it (the one
// source of an op's spec keys and call arguments): its summary, its
// parameters (name, meaning, default, choices or range, when it applies)
// and the arguments of a call in the order of its argument struct. --json
// for scripts and for the tests that check the C and Python copies of these
// lists against it.
#include <iostream>
#include <nlohmann/json.hpp>
#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/registry.h"

namespace qjit::cli {
namespace {

nlohmann::json describe(const codegen::OpDef& op) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : op.params()) {
    nlohmann::json j = {{"name", p.name}, {"doc", p.doc}, {"default", p.default_value}};
    if (!p.choices.empty()) j["choices"] = p.choices;
    else if (p.free_string) j["type"] = "string";
    else if (p.default_value.is_null() || p.default_value.is_number_integer()) j["min"] = p.min, j["max"] = p.max;
    if (!p.applies_if.first.empty()) j["applies_if"] = {{p.applies_if.first, p.applies_if.second}};
    if (p.omit_default) j["omit_default"] = true;
    params.push_back(j);
  }
  nlohmann::json args = nlohmann::json::array();
  for (const auto& a : op.args())
    args.push_back({{"name", a.name}, {"kind", a.kind == codegen::ArgDef::Kind::int32 ? "int32" : "pointer"}});
  return {{"op", op.name()}, {"summary", op.summary()}, {"params", params}, {"args", args}};
}

}  // namespace

void add_ops(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("ops", "every op: its spec keys (meaning, default, choices) and call arguments");
  static std::string only;
  static bool json = false;
  cmd->add_option("--op", only, "only this op");
  cmd->add_flag("--json", json, "one JSON array of {op, summary, params, args}");
  cmd->footer("Examples:\n  qjit ops\n  qjit ops --op w8a8_gemm --json\n" + std::string(kExitCodesHelp));
  cmd->callback([&rc] {
    nlohmann::json all = nlohmann::json::array();
    for (const auto* op : codegen::all_ops())
      if (only.empty() || op->name() == only) all.push_back(describe(*op));
    if (all.empty()) throw Error("spec", "unknown op '" + only + "'");  // (find_op's message names the ops)
    if (json) {
      std::cout << all.dump(2) << "\n";
    } else {
      for (const auto& o : all) {
        std::cout << o["op"].get<std::string>() << ": " << o["summary"].get<std::string>() << "\n  keys:\n";
        for (const auto& p : o["params"]) {
          std::string range;
          if (p.contains("choices")) {
            for (const auto& c : p["choices"]) range += (range.empty() ? "" : "|") + c.get<std::string>();
          } else if (p.contains("min")) {
            range = std::to_string(p["min"].get<long long>()) + ".." + std::to_string(p["max"].get<long long>());
          }
          std::cout << "    " << p["name"].get<std::string>() << (range.empty() ? "" : " (" + range + ")")
                    << (p["default"].is_null() ? ", required" : ", default " + p["default"].dump()) << ": "
                    << p["doc"].get<std::string>() << "\n";
        }
        std::cout << "  arguments:";
        for (const auto& a : o["args"])
          std::cout << " " << a["name"].get<std::string>() << (a["kind"] == "int32" ? " (int)" : "");
        std::cout << "\n";
      }
    }
    rc = kOk;
  });
}

}  // namespace qjit::cli
