// Extension ops through the stable ABI: kiln_library_define / _impl give an
// op "ns::name" a schema and per-device boxed kernels; the op joins call_op's
// registry, so C++ code, the C shim and other extensions call it by name.
// Without a shape function it runs outside the dispatcher (a graph break
// under kiln::compile, autograd through record_function with its backward
// op); kiln_library_shape declares it in the dispatcher instead (an OpDef
// whose kernel calls the extension's). load_extension checks an extension's
// ABI version before running its registrations.
#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <iostream>
#include <span>
#include <sstream>

#include "autograd/graph.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/call_op.h"
#include "kiln/error.h"
#include "kiln/extension.h"
#include "kiln/stable/c/shim.h"
#include "stable/shim_impl.h"
#include "stable/values.h"

namespace kiln {
namespace {

struct ExtensionOp {
  std::string name;  // ns::name
  std::string schema_text;
  Schema schema;
  size_t outputs = 0;
  std::array<KilnBoxedKernel, kNumDeviceTypes> kernels{};
  std::string backward;  // ns::backward_name, or empty
  // With a shape function: the op's declaration in the dispatcher, and its
  // index in ExtensionRegistry::by_id (an attribute of every call, since
  // the dispatcher's shape and kernel functions are plain pointers).
  KilnShapeFunction shape = nullptr;
  const OpDef* op_def = nullptr;
  int64_t id = -1;
};

struct ExtensionRegistry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<ExtensionOp>, std::less<>> ops;
  std::vector<const ExtensionOp*> by_id;
  std::set<std::string> loaded;  // extension paths, loaded once each
};

ExtensionRegistry& extensions() {
  static ExtensionRegistry r;
  return r;
}

// Op ns::name, which kiln_library_define must have declared (for `fn`'s
// error); the caller holds the registry's lock.
ExtensionOp& defined_op(ExtensionRegistry& r, const char* ns, const char* name, const char* fn) {
  const std::string full = std::string(ns) + "::" + name;
  auto it = r.ops.find(full);
  check(it != r.ops.end(), fn, "'", full, "' is not defined (kiln_library_define it first)");
  return *it->second;
}

// The gradients of an extension op's tensor inputs: its backward op called
// with the gradient of each result, then the forward call's arguments.
std::vector<Tensor> call_backward(const std::string& backward, const std::vector<Tensor>& grads,
                                  std::vector<IValue> forward_args) {
  std::vector<IValue> call_args(grads.begin(), grads.end());
  for (IValue& a : forward_args) call_args.push_back(std::move(a));
  std::vector<Tensor> input_grads;
  for (IValue& g : call_op(backward, std::move(call_args))) input_grads.push_back(std::get<Tensor>(std::move(g)));
  return input_grads;
}

// The op's boxed function for call_op: arguments to C values, the kernel of
// the tensors' device, its results back (the runtime owns their handles).
std::vector<IValue> run_kernel_of(const ExtensionOp& op, std::vector<IValue>& args);
std::vector<IValue> dispatch_extension_op(const ExtensionOp& op, std::vector<IValue>& args);

// Under kiln::compile the kernel needs its inputs' values (it has no shape
// function to be traced by): a graph break that names the op. With inputs
// that require grad, the result is recorded with the op's backward op.
std::vector<IValue> run_extension_op(const ExtensionOp& op, std::vector<IValue>& args) {
  if (op.op_def) return dispatch_extension_op(op, args);
  const std::string reason = "the extension op '" + op.name + "' (it runs on concrete values)";
  std::vector<Tensor> inputs;
  bool needs_grad = false;
  for (const IValue& a : args)
    if (const auto* t = std::get_if<Tensor>(&a); t && t->defined()) {
      detail::on_concrete_value(t->impl(), reason.c_str(), SourceLocation());
      inputs.push_back(*t);
      needs_grad = needs_grad || (t->requires_grad() && is_grad_enabled());
    }
  check(!needs_grad || !op.backward.empty(), op.name.c_str(), "an input requires grad but the op has no backward ",
        "(kiln_library_backward): its gradient would be lost");
  std::vector<IValue> results;
  {
    NoGradGuard kernel_internals;  // ops the kernel calls are not the op's history
    results = run_kernel_of(op, args);
  }
  if (!needs_grad) return results;
  std::vector<Tensor> outputs;
  for (IValue& r : results)
    if (auto* t = std::get_if<Tensor>(&r)) {
      *t = t->detach();  // a fresh handle: record_function gives it the op's history
      outputs.push_back(*t);
    }
  std::vector<IValue> forward_args = args;
  const std::string backward = op.backward;
  autograd::record_function(op.name, inputs, outputs, [backward, forward_args](const std::vector<Tensor>& grads) {
    return call_backward(backward, grads, forward_args);
  });
  return results;
}

std::vector<IValue> run_kernel_of(const ExtensionOp& op, std::vector<IValue>& args) {
  stable_abi::CValues m;
  DeviceType device = DeviceType::CPU;
  bool device_found = false;
  for (const IValue& a : args) {
    if (const auto* t = std::get_if<Tensor>(&a); t && t->defined() && !device_found) {
      device = t->device().type();
      device_found = true;
    }
    m.stack.push_back(m.to_c(a));
  }
  const KilnBoxedKernel kernel = op.kernels[static_cast<int>(device)];
  check(kernel != nullptr, op.name.c_str(), "has no kernel for device ", device_type_name(device));
  m.stack.resize(std::max(m.stack.size(), op.outputs));
  kiln_set_error("");
  const KilnError code = kernel(m.stack.data(), args.size(), op.outputs);
  if (code != KILN_OK) fail(op.name.c_str(), "the extension's kernel failed (code ", code, "): ", kiln_last_error());
  std::vector<IValue> results;
  for (size_t i = 0; i < op.outputs; ++i) {
    const KilnValue& r = m.stack[i];
    check(r.kind != KILN_VALUE_NONE, op.name.c_str(), "the extension's kernel left result ", i, " unset");
    results.push_back(stable_abi::from_c(r, "a kernel's result"));
    // The kernel's new handles are the runtime's to release; an argument's
    // own handle handed back is already the converter's.
    if (r.kind == KILN_VALUE_TENSOR && !m.owns(r.tensor)) delete r.tensor;
  }
  return results;
}

// ---- extension ops through the dispatcher (those with a shape function)

constexpr const char* kIdAttr = "extension_op";

const ExtensionOp& op_of(const Attrs& a) {
  ExtensionRegistry& r = extensions();
  std::lock_guard<std::mutex> lock(r.mu);
  return *r.by_id.at(static_cast<size_t>(a.get_int(kIdAttr)));
}

// The call's arguments in schema order, from the dispatcher's inputs (the
// tensors, in order) and attributes (the rest, by name; absent: None).
std::vector<IValue> arguments_of(const ExtensionOp& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  std::vector<IValue> args;
  size_t next = 0;
  for (const SchemaArg& a : op.schema.arguments) {
    if (a.is_tensor()) {
      args.emplace_back(inputs[next++]);
      continue;
    }
    IValue v = std::monostate{};
    for (const auto& [name, value] : attrs.items())
      if (name == a.name)
        v = std::visit(
            [](const auto& x) -> IValue {
              // No extension op's schema has an opaque argument (only C++ front ends build one).
              if constexpr (std::is_same_v<std::decay_t<decltype(x)>, OpaqueAttr>) return std::monostate{};
              else return IValue(x);
            },
            value);
    args.push_back(std::move(v));
  }
  return args;
}

std::vector<TensorMeta> extension_shape(std::span<const Tensor> inputs, const Attrs& attrs) {
  const ExtensionOp& op = op_of(attrs);
  std::vector<IValue> args = arguments_of(op, inputs, attrs);
  stable_abi::CValues m;
  for (const IValue& a : args) m.stack.push_back(m.to_c(a));
  std::vector<KilnTensorMeta> out(op.outputs);
  kiln_set_error("");
  const KilnError code = op.shape(m.stack.data(), m.stack.size(), out.data(), out.size());
  if (code != KILN_OK) fail(op.name.c_str(), "the extension's shape function failed (code ", code, "): ", kiln_last_error());
  std::vector<TensorMeta> metas;
  for (const KilnTensorMeta& k : out) {
    check(k.ndim >= 0 && k.ndim <= KILN_MAX_DIMS && k.dtype >= 0 && k.dtype < kNumDTypes, op.name.c_str(),
          "the shape function gave an invalid result (", k.ndim, " dims, dtype code ", k.dtype, ")");
    metas.emplace_back(Shape(k.sizes, k.sizes + k.ndim), static_cast<DType>(k.dtype));
  }
  return metas;
}

// The CPU kernel the dispatcher runs: the extension's boxed kernel, its
// results copied into the outputs the dispatcher allocated.
void extension_kernel(const OpCall& c) {
  const ExtensionOp& op = op_of(c.attrs);
  std::vector<IValue> args = arguments_of(op, c.inputs, c.attrs);
  std::vector<IValue> results = run_kernel_of(op, args);
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const auto* t = std::get_if<Tensor>(&results[i]);
    check(t && t->sizes() == c.outputs[i].sizes() && t->dtype() == c.outputs[i].dtype(), op.name.c_str(),
          "result ", i, " does not have the shape and dtype the shape function gave (",
          shape_str(c.outputs[i].sizes()), ", ", c.outputs[i].dtype(), ")");
    c.outputs[i].copy_(*t);
  }
}

// The gradients of the op's tensor inputs from its backward op.
std::vector<Tensor> extension_backward(const autograd::BackwardContext& ctx) {
  const ExtensionOp& op = op_of(ctx.attrs);
  return call_backward(op.backward, ctx.grads, arguments_of(op, ctx.inputs, ctx.attrs));
}

// Every extension op differentiates through the same trampoline (it finds
// the op's own backward from the node's attributes), so one definition
// serves all; the dispatcher keeps a pointer to it.
const autograd::BackwardDef kExtensionBackward{extension_backward, autograd::kSaveInputs};

// The front end of an op with a shape function: tensors as the inputs, the
// rest as attributes, through dispatch (modes, autograd, the tracer).
std::vector<IValue> dispatch_extension_op(const ExtensionOp& op, std::vector<IValue>& args) {
  std::vector<Tensor> inputs;
  Attrs attrs;
  for (size_t i = 0; i < args.size(); ++i) {
    const SchemaArg& a = op.schema.arguments[i];
    if (a.is_tensor()) {
      inputs.push_back(std::get<Tensor>(args[i]));
      continue;
    }
    std::visit(
        [&](auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (!std::is_same_v<V, std::monostate> && !std::is_same_v<V, Tensor> &&
                        !std::is_same_v<V, std::vector<Tensor>>)
            attrs.set(a.name, v);
        },
        args[i]);
  }
  attrs.set(kIdAttr, op.id);
  std::vector<IValue> results;
  for (Tensor& t : dispatch(*op.op_def, inputs, attrs)) results.emplace_back(std::move(t));
  return results;
}

std::string version_text(uint32_t v) {
  return std::to_string(v >> 16) + "." + std::to_string(v & 0xffff);
}

// KILN_EXTENSIONS, loaded the first time call_op meets an unknown name.
const bool environment_hooked = (set_missing_op_handler(&load_extensions_from_environment), true);

}  // namespace

void load_extension(const std::string& path) {
  ExtensionRegistry& r = extensions();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.loaded.count(path)) return;
  }
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  check(h != nullptr, "load_extension", "cannot load '", path, "': ", ::dlerror());
  using VersionFn = uint32_t (*)();
  using InitFn = KilnError (*)();
  const auto version = reinterpret_cast<VersionFn>(::dlsym(h, "kiln_extension_abi_version"));
  const auto init = reinterpret_cast<InitFn>(::dlsym(h, "kiln_extension_init"));
  check(version && init, "load_extension", "'", path,
        "' is no kiln extension (it lacks kiln_extension_abi_version or kiln_extension_init)");
  const uint32_t built = version();
  const uint32_t runtime = (KILN_STABLE_ABI_VERSION_MAJOR << 16) | KILN_STABLE_ABI_VERSION_MINOR;
  if ((built >> 16) != (runtime >> 16) || (built & 0xffff) > (runtime & 0xffff)) {
    ::dlclose(h);
    fail("load_extension", "'", path, "' was built against the stable ABI ", version_text(built),
         " but this kiln provides ", version_text(runtime), " (an extension loads when the major versions match and "
         "its minor version is at most the runtime's)");
  }
  const KilnError code = init();
  check(code == KILN_OK, "load_extension", "the registrations of '", path, "' failed (code ", code, "): ",
        kiln_last_error());
  std::lock_guard<std::mutex> lock(r.mu);
  r.loaded.insert(path);  // the handle stays open: its kernels are registered
}

void load_extensions_from_environment() {
  const char* list = std::getenv("KILN_EXTENSIONS");
  if (!list) return;
  // Every entry is tried: one that cannot load is reported (once: the list is
  // read once per process) and does not keep the others' ops away.
  std::stringstream paths(list);
  std::string path;
  while (std::getline(paths, path, ':')) {
    if (path.empty()) continue;
    try {
      load_extension(path);
    } catch (const Error& e) {
      std::cerr << "kiln: warning: KILN_EXTENSIONS: " << e.what() << "\n";
    }
  }
}

}  // namespace kiln

using namespace kiln;

namespace {

template <class F>
KilnError library_call(F&& f) {
  try {
    f();
    return KILN_OK;
  } catch (const std::exception& e) {
    kiln_set_error(e.what());
    return KILN_ERROR_RUNTIME;
  }
}

}  // namespace

namespace kiln::stable_abi::impl {


KilnError kiln_library_define(const char* ns, const char* schema) {
  return library_call([&] {
    check(ns && schema && *ns, "kiln_library_define", "null or empty namespace or schema");
    const std::string full = std::string(ns) + "::" + schema;
    const Schema parsed = parse_schema(full);
    for (const SchemaArg& r : parsed.returns)
      check(r.type != ArgType::TensorList, "kiln_library_define", "'", parsed.name,
            "': an extension op cannot return a Tensor[] yet");
    auto op = std::make_unique<ExtensionOp>();
    op->name = parsed.name;
    op->schema_text = full;
    op->schema = parsed;
    op->outputs = parsed.returns.size();
    const ExtensionOp* raw = op.get();
    {
      ExtensionRegistry& r = extensions();
      std::lock_guard<std::mutex> lock(r.mu);
      check(r.ops.emplace(parsed.name, std::move(op)).second, "kiln_library_define", "'", parsed.name,
            "' is defined twice");
    }
    register_public_op(full, [raw](std::vector<IValue>& args) { return run_extension_op(*raw, args); });
  });
}

KilnError kiln_library_shape(const char* ns, const char* name, KilnShapeFunction shape) {
  return library_call([&] {
    check(ns && name && shape, "kiln_library_shape", "null namespace, name or shape function");
    ExtensionOp* op = nullptr;
    {
      ExtensionRegistry& r = extensions();
      std::lock_guard<std::mutex> lock(r.mu);
      op = &defined_op(r, ns, name, "kiln_library_shape");
      const std::string& full = op->name;
      check(op->shape == nullptr, "kiln_library_shape", "'", full, "' has two shape functions");
      for (const SchemaArg& a : op->schema.arguments)
        check(!a.is_tensor() || (a.type == ArgType::Tensor && !a.optional), "kiln_library_shape", "'", full,
              "': argument '", a.name, "' must be a plain Tensor for the dispatcher");
      for (const SchemaArg& ret : op->schema.returns)
        check(ret.type == ArgType::Tensor, "kiln_library_shape", "'", full, "': every result must be a Tensor");
      op->shape = shape;
      op->id = static_cast<int64_t>(r.by_id.size());
      r.by_id.push_back(op);
    }
    // Varargs: the non-tensor arguments travel as attributes by name, with
    // the op's index (extension_op).
    op->op_def = &register_op(OpDef{op->name, op->schema_text, OpKind::Compute, extension_shape});
    register_kernel(op->name, DeviceType::CPU, extension_kernel);
    if (!op->backward.empty()) set_backward(op->name, &kExtensionBackward);
  });
}

KilnError kiln_library_backward(const char* ns, const char* name, const char* backward_name) {
  return library_call([&] {
    check(ns && name && backward_name, "kiln_library_backward", "null namespace or name");
    ExtensionRegistry& r = extensions();
    std::lock_guard<std::mutex> lock(r.mu);
    ExtensionOp& op = defined_op(r, ns, name, "kiln_library_backward");
    op.backward = std::string(ns) + "::" + backward_name;
    if (op.op_def)  // already in the dispatcher (kiln_library_shape came first)
      set_backward(op.name, &kExtensionBackward);
  });
}

KilnError kiln_library_impl(const char* ns, const char* name, int32_t device_type, KilnBoxedKernel kernel) {
  return library_call([&] {
    check(ns && name && kernel, "kiln_library_impl", "null namespace, name or kernel");
    check(device_type >= 0 && device_type < kNumDeviceTypes, "kiln_library_impl", "device type code ", device_type,
          " names no device type");
    ExtensionRegistry& r = extensions();
    std::lock_guard<std::mutex> lock(r.mu);
    ExtensionOp& op = defined_op(r, ns, name, "kiln_library_impl");
    KilnBoxedKernel& slot = op.kernels[device_type];
    check(slot == nullptr, "kiln_library_impl", "'", op.name, "' has two kernels for device ",
          device_type_name(static_cast<DeviceType>(device_type)));
    slot = kernel;
  });
}

}  // namespace kiln::stable_abi::impl
