#include "tuner/ops.h"
#include <map>
#include <mutex>
#include "codegen/error.h"
#include "codegen/op_list.h"
#include "codegen/registry.h"
#include "runtime/ops/run.h"

namespace qjit::tuner {

#define QJIT_DECLARE_WORKLOAD(name) \
  std::unique_ptr<Workload> make_##name##_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes);
QJIT_OPS(QJIT_DECLARE_WORKLOAD)
#undef QJIT_DECLARE_WORKLOAD

namespace {

std::mutex mu;

std::map<std::string, OpHooks>& table() {
#define QJIT_HOOKS_ENTRY(name)                                                                         \
  {#name, OpHooks{runtime::run_##name, [](const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) { \
                    return make_##name##_workload(spec, seed, l2_bytes);                                 \
                  }}},
  static std::map<std::string, OpHooks> hooks = {QJIT_OPS(QJIT_HOOKS_ENTRY)};
#undef QJIT_HOOKS_ENTRY
  return hooks;
}

}  // namespace

const OpHooks& op_hooks(const std::string& op) {
  std::lock_guard<std::mutex> lock(mu);
  const auto it = table().find(op);
  if (it == table().end()) throw Error("tuner", "no tuning workload for op '" + op + "'");
  return it->second;
}

void register_op(const codegen::OpDef& def, const OpHooks& hooks) {
  codegen::register_op(def);
  std::lock_guard<std::mutex> lock(mu);
  table()[def.name()] = hooks;
}

}  // namespace qjit::tuner
