// Each op's composition of one call on the caller's stream (defined in
// runtime/ops/<op>.cpp; the tuner times and verifies exactly these).
#pragma once
#include "codegen/op_list.h"
#include "runtime/plan.h"

namespace qjit::runtime {

#define QJIT_DECLARE_RUN(name) CUresult run_##name(const LoadedPlan& plan, const ArgPack& args, CUstream stream);
QJIT_OPS(QJIT_DECLARE_RUN)
#undef QJIT_DECLARE_RUN

}  // namespace qjit::runtime
