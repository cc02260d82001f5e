// What the tuner needs of each op beyond its definition: the runtime's
// composition of one call (the plan it times and verifies) and the workload
// that feeds and checks it. Shipped ops come from codegen/op_list.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include "codegen/op.h"
#include "runtime/plan.h"
#include "tuner/workload.h"

namespace qjit::tuner {

struct OpHooks {
  runtime::RunPlan run = nullptr;
  std::unique_ptr<Workload> (*make_workload)(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) = nullptr;
};

// Throws qjit::Error("tuner", ...) for an op with no hooks.
const OpHooks& op_hooks(const std::string& op);
// Registers an op this build does not ship (a test's): its definition in
// codegen's registry and its hooks here. `def` must outlive its use.
void register_op(const codegen::OpDef& def, const OpHooks& hooks);

}  // namespace qjit::tuner
