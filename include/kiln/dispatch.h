// The dispatcher: every op is an OpDef (name, schema, shape function, kernels)
// and every call goes through dispatch(), which first offers the call to the
// innermost DispatchMode on this thread (grad mode, tracing, tests) and only
// then runs the kernel for the tensors' device.
// See Note [One dispatch point] in src/dispatch/dispatcher.cpp.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/schema.h"
#include "kiln/tensor.h"

namespace kiln {

// An attribute only C++ front ends build: an object the op's kernels use
// (FlexAttention's score and mask mods with the kernels they instantiate)
// and a key naming its behaviour, which kiln::compile's cache compares:
// equal keys give equal results.
struct OpaqueAttr {
  std::shared_ptr<const void> object;
  std::string key;
};

using AttrValue = std::variant<int64_t, double, bool, Shape, DType, std::string, Device, OpaqueAttr>;

// Non-tensor arguments of an op call, by name. Small: a linear search is
// faster than a map for the two or three an op has.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) : items_(items) {}
  void set(std::string name, AttrValue v);
  bool has(std::string_view name) const { return find(name) != nullptr; }
  int64_t get_int(std::string_view name) const { return get<int64_t>(name); }
  double get_double(std::string_view name) const { return get<double>(name); }
  bool get_bool(std::string_view name) const { return get<bool>(name); }
  const Shape& get_shape(std::string_view name) const { return get<Shape>(name); }
  DType get_dtype(std::string_view name) const { return get<DType>(name); }
  const std::string& get_string(std::string_view name) const { return get<std::string>(name); }
  Device get_device(std::string_view name) const { return get<Device>(name); }
  const OpaqueAttr& get_opaque(std::string_view name) const { return get<OpaqueAttr>(name); }
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }

 private:
  const AttrValue* find(std::string_view name) const;
  template <typename T>
  const T& get(std::string_view name) const;
  std::vector<std::pair<std::string, AttrValue>> items_;
};

// What a shape function predicts for one output. Empty strides mean
// contiguous; view ops give explicit strides and offset. A shape function
// sets the device only where the op chooses it (factories, a copy to another
// device); output_metas gives the rest the inputs' device.
struct TensorMeta {
  TensorMeta(Shape sizes_, DType dtype_, Shape strides_ = {}, int64_t offset = 0,
             std::optional<Device> device_ = {})
      : sizes(std::move(sizes_)), dtype(dtype_), strides(std::move(strides_)), storage_offset(offset),
        device(device_) {}
  Shape sizes;
  DType dtype = kFloat32;
  Shape strides;
  int64_t storage_offset = 0;
  std::optional<Device> device;
};

struct OpCall {
  std::span<const Tensor> inputs;
  const Attrs& attrs;
  std::span<Tensor> outputs;  // allocated by the dispatcher from the shape function
};

namespace autograd {

// What an op's backward formula receives. The formulas are written with
// ordinary ops, so an op can declare its backward beside its front end
// (OpDef::backward); the autograd engine (src/autograd) runs them.
struct BackwardContext {
  const std::vector<Tensor>& inputs;   // saved inputs (undefined if the formula saves none)
  const std::vector<Tensor>& outputs;  // saved outputs (likewise)
  const std::vector<TensorMeta>& input_meta;
  const Attrs& attrs;
  const std::vector<Tensor>& grads;  // one per output, never undefined
  const std::vector<bool>& needs_input_grad;
};
// One gradient per input (undefined where none is needed).
using BackwardFn = std::vector<Tensor> (*)(const BackwardContext& ctx);

enum SaveFlags : uint8_t { kSaveNone = 0, kSaveInputs = 1, kSaveOutputs = 2, kSaveBoth = 3 };

struct BackwardDef {
  BackwardFn fn = nullptr;  // null: not differentiable (integer outputs, indices)
  uint8_t save = kSaveNone;
};
// The backward of an op that has no gradient (integer-valued results, index
// outputs, a backward op not itself differentiated).
inline constexpr BackwardDef kNotDifferentiable{nullptr, kSaveNone};

}  // namespace autograd

using ShapeFn = std::vector<TensorMeta> (*)(std::span<const Tensor> inputs, const Attrs& attrs);
using KernelFn = void (*)(const OpCall& call);

enum class OpKind : uint8_t {
  Compute,  // outputs are fresh tensors (or the out= tensors) written by a kernel
  View,     // outputs alias input 0's storage; the shape function gives their layout
};

// An op's declaration. Its kernels are not part of it: each device binds its
// own with register_kernel from its kernel folder (src/kernels/<device>/).
struct OpDef {
  std::string name;
  std::string schema;  // PyTorch-style, e.g. "add(Tensor self, Tensor other) -> Tensor"
  OpKind kind = OpKind::Compute;
  ShapeFn shape = nullptr;  // required: it alone must be enough to trace the op
  // Per device type, filled by register_kernel (view ops have none; the meta
  // device needs none: its ops run their shape function only).
  std::array<KernelFn, kNumDeviceTypes> kernels{};
  // The backward formula: given here by the op's declaration, or set by
  // autograd::register_backward (null: none declared, which a test forbids);
  // read on every recorded call, so held here rather than looked up by name.
  const autograd::BackwardDef* backward = nullptr;
  // `schema` parsed by register_op (which refuses a malformed one, or one
  // naming another op).
  Schema parsed{};
  // Its kernel talks to other processes (a collective): kiln::compile never
  // records it into a graph, but ends the graph there and runs it eagerly.
  bool has_side_effects = false;
  // Its outputs follow from its attributes and inputs that are already
  // computed (a block mask built from a C++ mask_mod): kiln::compile runs it
  // while tracing instead of recording it, so reading them breaks no graph.
  bool runs_while_tracing = false;
  // An elementwise op's math as C++ (set by set_pointwise from the kernels'
  // registrations; null: none): the functor in src/kernels/cpu/
  // pointwise_math.h whose f(tensor inputs..., float attributes in schema
  // order) computes one float32 element. A compiler that fuses loops calls
  // the same function as the eager kernel.
  const char* pointwise = nullptr;
};

// Declares an op once, at static-initialisation time; the reference stays
// valid for the life of the process.
const OpDef& register_op(OpDef def);
// Binds op `name`'s kernel for a device type, at static-initialisation time,
// in either order with the op's register_op (the two live in different
// translation units). Binding a device type twice is an error.
void register_kernel(std::string_view name, DeviceType device, KernelFn fn);
const OpDef* find_op(std::string_view name);
std::vector<const OpDef*> all_ops();
// Gives op `name` its backward formula (autograd::register_backward calls
// it), in either order with the op's register_op; `def` lives forever.
void set_backward(std::string_view name, const autograd::BackwardDef* def);
// Gives op `name` its pointwise functor (OpDef::pointwise), in either order
// with the op's register_op; `functor` lives forever.
void set_pointwise(std::string_view name, const char* functor);
// Kernels or backwards bound to names no op declares (a typo in a
// registration): empty in a correct build; a test checks it.
std::vector<std::string> registrations_without_op();

// Runs an op. `out` empty: outputs are allocated from the shape function.
// Otherwise `out` holds one tensor per output, of the predicted shape and
// dtype; they are written in place and their version counters bumped.
std::vector<Tensor> dispatch(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs = {},
                             std::span<const Tensor> out = {});
Tensor dispatch1(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs = {},
                 std::span<const Tensor> out = {});
inline Tensor dispatch1(const OpDef& op, std::initializer_list<Tensor> inputs, const Attrs& attrs = {},
                        std::span<const Tensor> out = {}) {
  return dispatch1(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs, out);
}

// The op's shape function, with every output's device filled in: the
// device the shape function chose, else the inputs' device (all inputs must
// be on one device, but for 0-dim CPU tensors, which go with any device as
// in PyTorch), else the default device. An error names the op and the
// devices when the inputs disagree.
std::vector<TensorMeta> output_metas(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);
// An uninitialised output as `m` describes it: row-major, or in the strides
// the shape function named (a channels-last output). Tracers allocate
// through it too, so a traced tensor's layout is the one eager gives.
Tensor empty_output(TensorMeta m);

// Skips modes and runs the kernel: what a mode calls to compute for real.
std::vector<Tensor> run_kernel(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                               std::span<const Tensor> out = {});

// A mode intercepts every op called on its thread while it is pushed. While
// its on_op runs, it is popped, so the ops it calls reach the modes below it
// (or the kernels): calling dispatch() from on_op is how a mode redispatches.
class DispatchMode {
 public:
  virtual ~DispatchMode() = default;
  virtual std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                                    std::span<const Tensor> out) = 0;
};

// A process-wide mode consulted below every thread's own modes (autograd
// installs itself here). While its on_op runs it is hidden on that thread.
void set_global_mode(DispatchMode* mode);

// Pushes a mode for its scope. Modes nest; the innermost sees ops first.
class ModeGuard {
 public:
  explicit ModeGuard(DispatchMode* mode);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;
};

// Whether a mode of this thread sees the next op (kiln::compile's tracer, a
// test's recorder): code with a fused fast path issues the separate ops
// then, so that the mode sees what it would without the fast path.
bool thread_modes_active();

// Hides this thread's modes and the global mode for its scope: ops run
// their kernels directly, as those a kernel calls do. For values built from
// no traced tensor that a program needs concretely (a block mask's lists),
// so tracing does not break on them.
class ModesOffGuard {
 public:
  ModesOffGuard();
  ~ModesOffGuard();
  ModesOffGuard(const ModesOffGuard&) = delete;
  ModesOffGuard& operator=(const ModesOffGuard&) = delete;

 private:
  size_t active_;
  bool global_visible_;
};

}  // namespace kiln

KILN_API_END
