// The interface every op implements, once, in codegen/ops/<op>.{h,cpp}:
// parameters → validated spec, the call's arguments, the tunable space, the
// heuristic default, the named constants of the generated preamble, the plan
// (kernels of the module and the steps of one call), and the byte/flop model
// the tuner reports against. Adding an op: docs/adding_an_op.md.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
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
  // Applies only while parameter applies_if.first is applies_if.second (e.g.
  // fused_ffn's bits with weights=native): left out of the canonical JSON,
  // shape string and label otherwise, whatever its value.
  std::pair<std::string, std::string> applies_if{};
};

// `p` marked omit_default.
inline ParamDef added_later(ParamDef p) {
  p.omit_default = true;
  return p;
}
// `p`, applying only while parameter `key` is `value`.
inline ParamDef only_if(const std::string& key, const std::string& value, ParamDef p) {
  p.applies_if = {key, value};
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

// An argument of an op's call: one field of the op's argument struct
// (qjit/qjit.h), a device pointer or an int such as M, in the struct's order.
// Kernels, tensor maps, pointer checks and library steps name arguments;
// runtime::ArgPack (runtime/plan.h) holds their values for one call.
struct ArgDef {
  enum class Kind { pointer, int32 };
  std::string name;
  Kind kind = Kind::pointer;
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
  unsigned max_grid = 0;  // with grid_per_sm: at most this many blocks (0: no cap)
  // With grid_per_sm, false: the blocks keep dynamic_smem instead of taking
  // their share of the SM, for a kernel whose own shared memory already
  // bounds the blocks per SM (fp_lut's 128 KB table). Its blocks padded to
  // the share ran 2.5% slower (fp_lut silu, n = 2^27, H200: 139.8 against
  // 136.4 µs); shared memory and the L1 cache share an SM's 256 KB.
  bool claim_sm_share = true;
  // At most ceil(blocks / SMs) blocks on any SM: each block takes that share
  // of the SM's shared memory (the runtime pads dynamic_smem up to it, never
  // down). Under PDL the block scheduler fills the SMs that the previous
  // grid freed first up to what they hold, so a grid of 2.6 blocks per SM
  // whose blocks fit 4 to an SM ran 4 on 52 SMs of an H100 and 1 or 2 on the
  // rest (qjit_timeline_probe), and the SMs with 4 set its time.
  bool spread = false;
  // The kernel's compile-time cluster (__cluster_dims__) has more than the
  // portable 8 blocks: the runtime allows it on the function
  // (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED; H100 takes 16).
  bool cluster_non_portable = false;
  // Workspace bytes per block of this kernel (Plan::workspace_bytes adds
  // them, once the grid is known on the device, to the plan's fixed part).
  size_t workspace_per_block = 0;
};

// A bulk-tensor-copy descriptor (CUtensorMap, 128 bytes), made by the runtime
// at each launch and passed by value. It views pointer argument `source` as a
// tensor of `rank` dimensions, innermost first: dims[d] elements, pitches
// [d - 1] bytes between consecutive indices of dimension d ≥ 1. With
// rows_arg set, the outermost dimension is that int argument (e.g. m) and its
// pitch is dims[0] elements (a row-major matrix). The kernel copies boxes of
// box[0] × box[1] (× box[2]) elements; elements outside the tensor arrive as
// zeros. With in_workspace, the tensor is the call's workspace at
// workspace_offset bytes (written by an earlier step) and source is empty.
struct TensorMap {
  enum class Element { f16, bf16, u32, u8 };
  std::string source;
  bool in_workspace = false;
  size_t workspace_offset = 0;
  std::string rows_arg;
  int rank = 2;
  Element element = Element::f16;
  long long dims[3] = {0, 0, 0};
  long long pitches[2] = {0, 0};
  unsigned box[3] = {1, 1, 1};
  bool swizzle_128 = false;  // the 128-byte swizzle (box[0] · element size = 128 bytes)
};

// One parameter of a kernel, in the kernel's order: an argument of the call,
// or a pointer into the call's workspace (scratch memory the runtime owns:
// one buffer per stream, zeroed once when allocated; kernels leave it zeroed
// again where they need zeros, e.g. counters the last block resets; null
// when the plan needs none).
struct KernelParam {
  // iteration: an int, the launch's index 0..repeat-1 within its step (PlanStep::repeat).
  enum class Kind { arg, workspace, iteration };
  Kind kind = Kind::arg;
  std::string arg;    // Kind::arg
  size_t offset = 0;  // Kind::workspace: bytes into the workspace
};
inline KernelParam arg_param(std::string name) { return {KernelParam::Kind::arg, std::move(name), 0}; }
inline KernelParam workspace_param(size_t offset = 0) { return {KernelParam::Kind::workspace, "", offset}; }
inline KernelParam iteration_param() { return {KernelParam::Kind::iteration, "", 0}; }

// A kernel of the op's module (an extern "C" symbol of its template).
// init: run once each time the module is loaded, before any call (e.g.
// fp_lut's table of every fp16 input in a __device__ array); it takes no
// parameters. step: launched by the plan's steps.
struct KernelDef {
  enum class Role { init, step };
  std::string symbol;
  Role role = Role::step;
  LaunchGeometry geometry;
  std::vector<KernelParam> params;
  std::vector<TensorMap> tensor_maps;  // passed by value after params, in this order
  // The most maps a launch passes (wq_gemm's wgmma kernel with x, the
  // weights, scales and zeros by the tensor copy engine uses all four).
  static constexpr size_t kMaxTensorMaps = 4;
};

// A cuBLAS GEMM step: y[rows][n] = x[rows][k]·Wᵀ with W a dense [n][k]
// matrix, argument w or (w "") at workspace offset w_offset, written by an
// earlier step; x, W and y of one 16-bit type; rows the int argument `rows`,
// or fixed_rows when that is "". With to_sums, the GEMM writes fp32 sums at
// workspace offset sums_offset and nothing else (a later step reads them).
// Otherwise, without an epilogue the GEMM writes y (β = 1 over y holding the
// residual, copied in first unless residual is y). With one, per slab of
// slab_rows rows the GEMM writes fp32 sums at sums_offset and
// kernels[epilogue] stores y from them; that kernel takes (sums, bias,
// residual, y, int rows_of_slab, int first_row), passed by the step (its
// KernelDef has no params of its own).
struct CublasGemm {
  std::string x, w, bias, residual, y, rows;  // arguments; w, bias, residual "" when not used
  long long fixed_rows = 0;
  bool to_sums = false;
  long long k = 0, n = 0;
  bool bf16 = false;  // x, W and y in bf16 (else fp16)
  size_t w_offset = 0, sums_offset = 0;
  long long slab_rows = 0;
  int epilogue = -1;
};

// A cuBLASLt block-scaled FP8 GEMM step (cuBLASLt 12.9+, compute capability
// 9.0+): y[rows][n] = Σ_kb sx[kb][row]·sW[n/128][kb]·(codes[row][kb]·W[n][kb]ᵀ)
// (+ bias[n], then relu), over blocks kb of 128 of k. x's e4m3 codes [rows][k]
// are at workspace offset x_offset and their scales (cuBLASLt's VEC128_32F,
// one per row and block: [k/128][rows rounded up to 4], rows the call's) at x_scale_offset;
// W's e4m3 codes [n][k] are argument w and its 128 × 128 tile scales
// (BLK128x128_32F: [n/128][k/128]) at workspace offset w_scale_offset, all
// written by earlier steps. `algo` picks the heuristic's algo-th answer for
// the call's shape (its best when it has fewer). cuBLASLt's own scratch is
// the runtime's, one buffer per stream (runtime/cublaslt.h).
struct CublasLtFp8Gemm {
  enum class Out { f16, bf16, f32 };
  std::string w, bias, y, rows;  // arguments; bias "" when not used
  long long k = 0, n = 0;
  Out out = Out::f16;  // y's and bias's type
  bool relu = false;
  int algo = 0;
  size_t x_offset = 0, x_scale_offset = 0, w_scale_offset = 0;
};

// One step of a call: a kernel launch or a library call, on the caller's stream.
struct PlanStep {
  enum class Kind { kernel, cublas_gemm, cublaslt_fp8_gemm };
  Kind kind = Kind::kernel;
  int kernel = -1;  // Kind::kernel: index into Plan::kernels
  CublasGemm gemm;  // Kind::cublas_gemm
  CublasLtFp8Gemm lt{};  // Kind::cublaslt_fp8_gemm
  // Kind::kernel: launched this many times in a row on the stream (a
  // recurrence's steps), each launch seeing its index in its iteration param.
  int64_t repeat = 1;
};

// A pointer argument's requirements under a config: the alignment its
// vector accesses need, and whether null is allowed (the spec does not read
// it, e.g. no bias). The runtime checks these before launching anything.
struct PointerArg {
  std::string name;
  int align = 1;
  bool optional = false;
};

// What one config launches: the module's kernels, the steps of one call in
// order (runtime/ops/<op>.cpp composes them on the caller's stream; the
// tuner times and verifies exactly that), the checks on the call's pointers,
// and the workspace the steps share.
struct Plan {
  std::vector<KernelDef> kernels;
  std::vector<PlanStep> steps;
  std::vector<PointerArg> pointers;
  size_t workspace_fixed = 0;

  bool needs_cublas() const;    // a cublas_gemm step (libcublas)
  bool needs_cublaslt() const;  // a cublaslt_fp8_gemm step (libcublasLt)
  // The first step kernel: the only one of a single-kernel plan.
  const KernelDef& main_kernel() const;
  // One line per step: "kernel qjit_wq_gemm <<<...>>>", "cublas gemm ...".
  std::string describe() const;
};

// Row buckets of ops tuned per bucket of M (wq_gemm, w8a8_gemm): the next
// power of two of m, at most `top` (which serves any larger M); and the
// buckets serving lo..hi rows (`--m 1-8` is 1, 2, 4, 8).
int pow2_bucket(int64_t m, int top);
std::vector<int64_t> pow2_buckets(int64_t lo, int64_t hi, int top);

// A plan of one step kernel `symbol` taking `params`.
Plan single_kernel_plan(std::string symbol, LaunchGeometry geometry, std::vector<KernelParam> params,
                        std::vector<PointerArg> pointers);
// arg_param of each name, in order.
std::vector<KernelParam> arg_params(std::initializer_list<const char*> names);

// What a GPU offers that bounds which configs are worth timing: read from
// the device when tuning; an H100's or H200's (the defaults) when a space
// is listed without a GPU.
struct DeviceLimits {
  int sm_count = 132;
  int smem_per_sm = 228 * 1024;         // shared memory of one SM, bytes
  int smem_reserved_per_block = 1024;   // what the system keeps of it per block
  int compute_capability = 90;          // major·10 + minor
  // The target its kernels compile for ("sm_80", "sm_90"): a family of sm_90a
  // instructions (needs_sm90a) is offered only where this is "sm_90".
  std::string arch = "sm_90";
  // The most dynamic shared memory one block may opt in to (227 KB on the H100 and H200).
  int smem_per_block() const { return smem_per_sm - smem_reserved_per_block; }
};

// What a block may opt in to on every GPU qjit targets (sm_80's 163 KB and up):
// the limit of the families whose configs must also run where they were not
// tuned (the default config a runtime miss compiles, on any device).
inline constexpr int kPortableSmemPerBlock = 160 * 1024;

// The lowest compute capability (major·10 + minor) a spec's kernels run on,
// and why, where that is above what qjit needs anyway (sm_80).
struct ArchNeed {
  int compute_capability = 0;  // 0: no more than qjit's floor
  std::string why;             // "w8a8_gemm format=e4m3 runs on the FP8 tensor cores (...)"
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

  // The call's arguments, in the order of the op's argument struct.
  virtual std::vector<ArgDef> args() const = 0;

  // "templates/<op>/<file>.cu": the module of a config (an op may have
  // several kernel families, one template each).
  virtual std::string template_path(const nlohmann::json& config) const = 0;
  // The config's kernel uses instructions of the sm_90a target only (wgmma):
  // it is compiled for sm_90a and only for compute capability 9.0.
  virtual bool needs_sm90a(const nlohmann::json& config) const {
    (void)config;
    return false;
  }
  // The GPUs the spec's kernels need at least (e.g. FP8 tensor cores): compile()
  // refuses an older target with `why`, and tunable_space() refuses the spec on
  // an older device, before anything is compiled or cached.
  virtual ArchNeed arch_need(const OpSpec& spec) const {
    (void)spec;
    return {};
  }

  // Every candidate config that passes static pruning for this spec on a
  // device with these limits. Throws qjit::Error("spec", ...) when the device
  // is older than arch_need(spec).
  std::vector<nlohmann::json> tunable_space(const OpSpec& spec, const DeviceLimits& device = {}) const {
    check_arch(spec, device.compute_capability);
    return candidates(spec, device);
  }
  // Throws qjit::Error("spec", ...) naming arch_need(spec).why when
  // compute_capability (major·10 + minor) is below what the spec needs.
  void check_arch(const OpSpec& spec, int compute_capability) const;
  virtual std::vector<nlohmann::json> candidates(const OpSpec& spec, const DeviceLimits& device) const = 0;
  // The config used on a runtime miss before anything was tuned.
  virtual nlohmann::json default_config(const OpSpec& spec) const = 0;
  // Throws qjit::Error("config", ...) when a config is not legal for the spec.
  virtual void validate_config(const OpSpec& spec, const nlohmann::json& config) const = 0;

  virtual std::vector<Constant> constants(const OpSpec& spec, const nlohmann::json& config) const = 0;
  virtual Plan plan(const OpSpec& spec, const nlohmann::json& config) const = 0;
  virtual Traffic traffic(const OpSpec& spec) const = 0;
};

}  // namespace qjit::codegen
