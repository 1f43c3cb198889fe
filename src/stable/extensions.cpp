// Extension ops through the stable ABI: kiln_library_define / _impl give an
// op "ns::name" a schema and per-device boxed kernels; the op joins call_op's
// registry, so C++ code, the C shim and other extensions call it by name.
// load_extension checks an extension's ABI version before running its
// registrations.
#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/call_op.h"
#include "kiln/error.h"
#include "kiln/extension.h"
#include "kiln/stable/c/shim.h"
#include "stable/shim_impl.h"
#include "stable/handles.h"

namespace kiln {
namespace {

struct ExtensionOp {
  std::string name;  // ns::name
  size_t outputs = 0;
  std::array<KilnBoxedKernel, kNumDeviceTypes> kernels{};
  std::string backward;  // ns::backward_name, or empty
};

struct ExtensionRegistry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<ExtensionOp>, std::less<>> ops;
  std::set<std::string> loaded;  // extension paths, loaded once each
};

ExtensionRegistry& extensions() {
  static ExtensionRegistry r;
  return r;
}

// An argument as the kernel reads it; the lists and strings it points to
// live in `keep` until the kernel returns.
struct Marshalled {
  std::vector<KilnValue> stack;
  std::vector<KilnTensorHandle> owned;
  std::vector<std::unique_ptr<Shape>> lists;
  std::vector<std::unique_ptr<std::vector<KilnTensorHandle>>> tensor_lists;
  std::vector<std::unique_ptr<std::string>> strings;
  ~Marshalled() {
    for (KilnTensorHandle h : owned) delete h;
  }
  KilnTensorHandle handle(const Tensor& t) {
    owned.push_back(new KilnTensorOpaque{t});
    return owned.back();
  }
  KilnValue value(const IValue& v) {
    KilnValue out{};
    if (const auto* t = std::get_if<Tensor>(&v)) {
      out.kind = KILN_VALUE_TENSOR;
      out.tensor = handle(*t);
    } else if (const auto* l = std::get_if<std::vector<Tensor>>(&v)) {
      auto hs = std::make_unique<std::vector<KilnTensorHandle>>();
      for (const Tensor& t : *l) hs->push_back(handle(t));
      out.kind = KILN_VALUE_TENSOR_LIST;
      out.tensors = hs->data();
      out.count = static_cast<int64_t>(hs->size());
      tensor_lists.push_back(std::move(hs));
    } else if (const auto* i = std::get_if<int64_t>(&v)) {
      out.kind = KILN_VALUE_INT, out.i = *i;
    } else if (const auto* f = std::get_if<double>(&v)) {
      out.kind = KILN_VALUE_FLOAT, out.f = *f;
    } else if (const auto* b = std::get_if<bool>(&v)) {
      out.kind = KILN_VALUE_BOOL, out.i = *b;
    } else if (const auto* s = std::get_if<Shape>(&v)) {
      lists.push_back(std::make_unique<Shape>(*s));
      out.kind = KILN_VALUE_INT_LIST;
      out.ints = lists.back()->data();
      out.count = static_cast<int64_t>(lists.back()->size());
    } else if (const auto* str = std::get_if<std::string>(&v)) {
      strings.push_back(std::make_unique<std::string>(*str));
      out.kind = KILN_VALUE_STRING, out.str = strings.back()->c_str();
    } else if (const auto* d = std::get_if<DType>(&v)) {
      out.kind = KILN_VALUE_DTYPE, out.dtype = static_cast<int32_t>(*d);
    } else if (const auto* dev = std::get_if<Device>(&v)) {
      out.kind = KILN_VALUE_DEVICE, out.dtype = static_cast<int32_t>(dev->type()), out.i = dev->index();
    }
    return out;
  }
};

// The op's boxed function for call_op: arguments to C values, the kernel of
// the tensors' device, its results back (the runtime owns their handles).
std::vector<IValue> run_kernel_of(const ExtensionOp& op, std::vector<IValue>& args);

// Under kiln::compile the kernel needs its inputs' values (it has no shape
// function to be traced by): a graph break that names the op. With inputs
// that require grad, the result is recorded with the op's backward op.
std::vector<IValue> run_extension_op(const ExtensionOp& op, std::vector<IValue>& args) {
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
    std::vector<IValue> call_args(grads.begin(), grads.end());
    call_args.insert(call_args.end(), forward_args.begin(), forward_args.end());
    std::vector<Tensor> input_grads;
    for (IValue& g : call_op(backward, std::move(call_args))) input_grads.push_back(std::get<Tensor>(std::move(g)));
    return input_grads;
  });
  return results;
}

std::vector<IValue> run_kernel_of(const ExtensionOp& op, std::vector<IValue>& args) {
  Marshalled m;
  DeviceType device = DeviceType::CPU;
  bool device_found = false;
  for (const IValue& a : args) {
    if (const auto* t = std::get_if<Tensor>(&a); t && t->defined() && !device_found) {
      device = t->device().type();
      device_found = true;
    }
    m.stack.push_back(m.value(a));
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
    if (r.kind == KILN_VALUE_TENSOR && r.tensor) {
      // Written by the kernel: new handles, unless it handed back an
      // argument's own handle (then it is already in `owned`).
      const bool argument = std::find(m.owned.begin(), m.owned.end(), r.tensor) != m.owned.end();
      results.emplace_back(r.tensor->t);
      if (!argument) delete r.tensor;
    } else if (r.kind == KILN_VALUE_INT) {
      results.emplace_back(r.i);
    } else if (r.kind == KILN_VALUE_FLOAT) {
      results.emplace_back(r.f);
    } else if (r.kind == KILN_VALUE_BOOL) {
      results.emplace_back(r.i != 0);
    } else {
      fail(op.name.c_str(), "the extension's kernel left result ", i, " unset (kind ", r.kind, ")");
    }
  }
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
  std::stringstream paths(list);
  std::string path;
  while (std::getline(paths, path, ':'))
    if (!path.empty()) load_extension(path);
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

KilnError kiln_library_backward(const char* ns, const char* name, const char* backward_name) {
  return library_call([&] {
    check(ns && name && backward_name, "kiln_library_backward", "null namespace or name");
    const std::string full = std::string(ns) + "::" + name;
    ExtensionRegistry& r = extensions();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.ops.find(full);
    check(it != r.ops.end(), "kiln_library_backward", "'", full, "' is not defined (kiln_library_define it first)");
    it->second->backward = std::string(ns) + "::" + backward_name;
  });
}

KilnError kiln_library_impl(const char* ns, const char* name, int32_t device_type, KilnBoxedKernel kernel) {
  return library_call([&] {
    check(ns && name && kernel, "kiln_library_impl", "null namespace, name or kernel");
    check(device_type >= 0 && device_type < kNumDeviceTypes, "kiln_library_impl", "device type code ", device_type,
          " names no device type");
    const std::string full = std::string(ns) + "::" + name;
    ExtensionRegistry& r = extensions();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.ops.find(full);
    check(it != r.ops.end(), "kiln_library_impl", "'", full, "' is not defined (kiln_library_define it first)");
    KilnBoxedKernel& slot = it->second->kernels[device_type];
    check(slot == nullptr, "kiln_library_impl", "'", full, "' has two kernels for device ",
          device_type_name(static_cast<DeviceType>(device_type)));
    slot = kernel;
  });
}

}  // namespace kiln::stable_abi::impl
