// The interface every op implements, once, in codegen/ops/<op>.{h,cpp}:
// parameters → validated spec, the tunable space, the heuristic default, the
// named constants of the generated preamble, launch geometry, and the byte/flop
// model the tuner reports against. Adding an op = one OpDef + one registration.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/error.h"
#include "codegen/spec.h"

namespace qjit::codegen {

// One parameter of a spec, used for validation, defaults and `--help` text.
struct ParamDef {
  std::string name;
  std::string doc;
  nlohmann::json default_value;            // null: required
  std::vector<std::string> choices;        // non-empty: an enum of strings
  int64_t min = 1, max = INT64_MAX;        // for integers
  bool free_string = false;                // any string (the op's validate() checks it)
  // Left out of the canonical JSON, shape string and label while it holds its
  // default: for keys added to an op later, so earlier specs keep their cache keys.
  bool omit_default = false;
};

// `p` marked omit_default.
inline ParamDef added_later(ParamDef p) {
  p.omit_default = true;
  return p;
}

// One named value of the generated preamble: `constexpr type name = value;`.
// type "using" emits an alias; type "struct" emits `struct name { value };`
// where value holds the struct's own constexpr members (e.g. a LUT).
struct Constant {
  std::string type;     // "int", "long long", "using", "struct", "macro" (a #define: kernel attributes), ...
  std::string name;     // kD, TX, Lut, ...
  std::string value;    // "4096", "qjit::half_t", member lines
  std::string comment;  // what it means
};

struct LaunchGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem = 0;
  // The kernel reads nothing an earlier kernel of the stream may write, and
  // writes nothing, before griddepcontrol.wait, and lets dependents start
  // with griddepcontrol.launch_dependents: on sm_90+ it is launched with
  // programmatic stream serialization (PDL), so its prologue (weight loads)
  // overlaps the previous kernel's tail.
  bool programmatic = false;
  // A persistent grid: grid[0] = grid_per_sm × the device's SMs (set when
  // the runtime loads the kernel; grid[0] is ignored). Each block takes
  // 1/grid_per_sm of the SM's shared memory, or dynamic_smem if that is more.
  unsigned grid_per_sm = 0;
  // At most ceil(blocks / SMs) blocks on any SM: each block takes that share
  // of the SM's shared memory (the runtime pads dynamic_smem up to it, never
  // down). Under PDL the block scheduler fills the SMs that the previous
  // grid freed first up to what they hold, so a grid of 2.6 blocks per SM
  // whose blocks fit 4 to an SM ran 4 on 52 SMs of an H100 and 1 or 2 on the
  // rest (qjit_timeline_probe), and the SMs with 4 set its time.
  bool spread = false;
  // Scratch memory the runtime owns for the kernel: workspace_fixed +
  // workspace_per_block × blocks bytes, zeroed once when allocated, one per
  // stream the kernel runs on (the kernel leaves it zeroed again: e.g.
  // counters that the last block to use them resets). Passed as kernel
  // parameter `workspace_param`, the last one (null when the size is 0);
  // callers pass the ones before it.
  size_t workspace_fixed = 0, workspace_per_block = 0;
  int workspace_param = -1;
  // Bulk-tensor-copy descriptors (CUtensorMap, 128 bytes each), made by the
  // runtime at each launch and passed by value as the kernel's last
  // parameters, in this order, after the workspace (so workspace_param must
  // be set). Map i views caller parameter `source` (a device pointer) as a
  // tensor of `rank` dimensions, innermost first: dims[d] elements, pitches
  // [d - 1] bytes between consecutive indices of dimension d ≥ 1. With
  // rows_param ≥ 0 the outermost dimension is caller parameter rows_param
  // (an int, e.g. M) and its pitch is dims[0] elements (a row-major
  // matrix). The kernel copies boxes of box[0] × box[1] (× box[2])
  // elements; elements outside the tensor arrive as zeros.
  struct TensorMap {
    enum class Element { f16, bf16, u32, u8 };
    int source = 0, rows_param = -1, rank = 2;
    Element element = Element::f16;
    long long dims[3] = {0, 0, 0};
    long long pitches[2] = {0, 0};
    unsigned box[3] = {1, 1, 1};
    bool swizzle_128 = false;  // the 128-byte swizzle (box[0] · element size = 128 bytes)
  };
  std::vector<TensorMap> tensor_maps;
  // The most maps a launch passes: the runtime holds them in a fixed array
  // (wq_gemm's wgmma kernel with x, the weights, scales and zeros by the
  // tensor copy engine uses all four).
  static constexpr size_t kMaxTensorMaps = 4;
  int tensor_map_param(size_t i) const { return workspace_param + 1 + static_cast<int>(i); }
  // A cuBLAS GEMM after the kernel (wq_gemm's "cublas" family: the kernel
  // writes a dense W[n][k] at the start of the workspace). With `on`, a
  // launch is: the kernel; then y[rows][n] = x[rows][k]·Wᵀ, rows = the int
  // parameter rows_param, x, residual and y caller pointer parameters, all
  // of one 16-bit type. slab_rows 0: the GEMM writes y (β = 1 over y holding
  // the residual, copied in first unless residual is y). slab_rows > 0: per
  // slab of that many rows, the GEMM writes fp32 sums into the workspace
  // after W and the module's `<kernel>_epilogue(sums, bias, residual, y,
  // rows, m0)` stores y from them (bias_param names the bias; -1: none).
  struct DenseGemm {
    bool on = false;
    int x_param = 0, bias_param = -1, residual_param = -1, y_param = 0, rows_param = 0;
    long long k = 0, n = 0;
    bool bf16 = false;  // x, W and y in bf16 (else fp16)
    long long slab_rows = 0;
  } dense_gemm;
};

// A pointer parameter of the kernel, in launch order, and the alignment the
// config's vector accesses need. The runtime checks these before launching.
// optional: the spec does not read it (e.g. no bias), so null is allowed.
struct PointerArg {
  std::string name;
  int align = 1;
  bool optional = false;
};

// Bytes a kernel must move at least (each input read once, output written
// once) and the floating-point work: the floor the tuner reports against.
struct Traffic {
  double bytes = 0;
  double flops = 0;
};

class OpDef {
 public:
  virtual ~OpDef() = default;
  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;
  virtual std::vector<ParamDef> params() const = 0;
  // Cross-parameter checks after each parameter passed its own; throw
  // qjit::Error("spec", ...) naming the value.
  virtual void validate(const nlohmann::json& params) const { (void)params; }
  // The values of spec key m that serve launches of lo..hi rows of x, one
  // spec each (`--m lo-hi`): every value by default; an op whose kernels
  // serve buckets of rows returns the buckets covering the range.
  virtual std::vector<int64_t> m_values_for_rows(int64_t lo, int64_t hi) const {
    if (hi - lo >= 4096)
      throw Error("spec", name() + " m=" + std::to_string(lo) + "-" + std::to_string(hi) + " is " +
                              std::to_string(hi - lo + 1) + " specs, one kernel each; give at most 4096");
    std::vector<int64_t> v;
    for (int64_t m = lo; m <= hi; ++m) v.push_back(m);
    return v;
  }

  // "templates/<op>/<file>.cu": an op may have several kernel families.
  virtual std::string template_path(const nlohmann::json& config) const = 0;
  virtual std::string kernel_name() const = 0;    // extern "C" entry point
  // The config's kernel uses instructions of the sm_90a target only (wgmma):
  // it is compiled for sm_90a and only for compute capability 9.0.
  virtual bool needs_sm90a(const nlohmann::json& config) const {
    (void)config;
    return false;
  }

  // Every candidate config that passes static pruning for this spec.
  virtual std::vector<nlohmann::json> tunable_space(const OpSpec& spec) const = 0;
  // The config used on a runtime miss before anything was tuned.
  virtual nlohmann::json default_config(const OpSpec& spec) const = 0;
  // Throws qjit::Error("config", ...) when a config is not legal for the spec.
  virtual void validate_config(const OpSpec& spec, const nlohmann::json& config) const = 0;

  virtual std::vector<Constant> constants(const OpSpec& spec, const nlohmann::json& config) const = 0;
  virtual LaunchGeometry launch_geometry(const OpSpec& spec, const nlohmann::json& config) const = 0;
  virtual std::vector<PointerArg> pointer_args(const OpSpec& spec, const nlohmann::json& config) const = 0;
  virtual Traffic traffic(const OpSpec& spec) const = 0;
};

}  // namespace qjit::codegen
