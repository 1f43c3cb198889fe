// Note [One dispatch point]
// Every op call, from a free function, a Tensor method or the stable ABI,
// ends in dispatch(). It offers the call to the innermost DispatchMode of this
// thread first; grad mode, the compile tracer and tests are such modes, so no
// op needs special cases for them. Without a mode, run_kernel() asks the op's
// shape function for the outputs' metadata, allocates them (or checks the
// out= tensors against it), and calls the kernel for the inputs' device.
#include "kiln/dispatch.h"

#include <algorithm>
#include <chrono>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "kiln/error.h"
#include "kiln/profiler.h"

namespace kiln {

// ---- Attrs

void Attrs::set(std::string name, AttrValue v) {
  for (auto& [k, val] : items_)
    if (k == name) {
      val = std::move(v);
      return;
    }
  items_.emplace_back(std::move(name), std::move(v));
}

const AttrValue* Attrs::find(std::string_view name) const {
  for (const auto& [k, v] : items_)
    if (k == name) return &v;
  return nullptr;
}

template <typename T>
const T& Attrs::get(std::string_view name) const {
  const AttrValue* v = find(name);
  if (!v) fail("dispatch", "missing attribute '", name, "'");
  const T* p = std::get_if<T>(v);
  if (!p) fail("dispatch", "attribute '", name, "' has another type");
  return *p;
}
template const int64_t& Attrs::get<int64_t>(std::string_view) const;
template const double& Attrs::get<double>(std::string_view) const;
template const bool& Attrs::get<bool>(std::string_view) const;
template const Shape& Attrs::get<Shape>(std::string_view) const;
template const DType& Attrs::get<DType>(std::string_view) const;
template const std::string& Attrs::get<std::string>(std::string_view) const;
template const Device& Attrs::get<Device>(std::string_view) const;
template const OpaqueAttr& Attrs::get<OpaqueAttr>(std::string_view) const;

// ---- registry

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops;
  // Kernels and backwards registered before their op's declaration, by op name.
  struct Early {
    std::array<KernelFn, kNumDeviceTypes> kernels{};
    const autograd::BackwardDef* backward = nullptr;
    const char* pointwise = nullptr;
  };
  std::map<std::string, Early, std::less<>> early;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The mode stack of this thread. `active` counts the modes visible to the
// next dispatch: it drops while a mode's on_op runs so that mode's own calls
// go below it.
struct ModeStack {
  std::vector<DispatchMode*> modes;
  size_t active = 0;
  bool global_visible = true;
};
thread_local ModeStack mode_stack;
std::atomic<DispatchMode*> global_mode{nullptr};

// Restores the mode stack's visibility when a mode's on_op or a kernel ends.
struct Visibility {
  ModeStack& st;
  size_t active;
  bool global_visible;
  explicit Visibility(ModeStack& s) : st(s), active(s.active), global_visible(s.global_visible) {}
  ~Visibility() {
    st.active = active;
    st.global_visible = global_visible;
  }
};

bool same_layout(const Tensor& a, const Tensor& b) {
  return a.impl()->data() == b.impl()->data() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.dtype() == b.dtype();
}

}  // namespace

const OpDef& register_op(OpDef def) {
  check(def.shape != nullptr, "register_op", "op '", def.name, "' has no shape function");
  def.parsed = parse_schema(def.schema);
  check(def.parsed.name == def.name, "register_op", "op '", def.name, "' has the schema of '", def.parsed.name, "'");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, inserted] = r.ops.emplace(def.name, nullptr);
  check(inserted, "register_op", "op '", def.name, "' is registered twice");
  if (auto early = r.early.find(def.name); early != r.early.end()) {
    for (int d = 0; d < kNumDeviceTypes; ++d)
      if (early->second.kernels[d]) def.kernels[d] = early->second.kernels[d];
    if (early->second.backward) def.backward = early->second.backward;
    if (early->second.pointwise) def.pointwise = early->second.pointwise;
    r.early.erase(early);
  }
  it->second = std::make_unique<OpDef>(std::move(def));
  return *it->second;
}

void register_kernel(std::string_view name, DeviceType device, KernelFn fn) {
  check(fn != nullptr, "register_kernel", "null kernel for op '", name, "'");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int d = static_cast<int>(device);
  auto it = r.ops.find(name);
  KernelFn& slot = it != r.ops.end() ? it->second->kernels[d] : r.early[std::string(name)].kernels[d];
  check(slot == nullptr, "register_kernel", "op '", name, "' has two kernels for device ", device_type_name(device));
  slot = fn;
}

void set_backward(std::string_view name, const autograd::BackwardDef* def) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  (it != r.ops.end() ? it->second->backward : r.early[std::string(name)].backward) = def;
}

void set_pointwise(std::string_view name, const char* functor) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  (it != r.ops.end() ? it->second->pointwise : r.early[std::string(name)].pointwise) = functor;
}

std::vector<std::string> registrations_without_op() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, early] : r.early) names.push_back(name);
  return names;
}

const OpDef* find_op(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second.get();
}

std::vector<const OpDef*> all_ops() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const OpDef*> out;
  for (auto& [k, v] : r.ops) out.push_back(v.get());
  return out;
}

// ---- modes

void set_global_mode(DispatchMode* mode) { global_mode.store(mode, std::memory_order_release); }

ModeGuard::ModeGuard(DispatchMode* mode) {
  mode_stack.modes.push_back(mode);
  mode_stack.active = mode_stack.modes.size();
}

ModeGuard::~ModeGuard() {
  mode_stack.modes.pop_back();
  mode_stack.active = mode_stack.modes.size();
}

bool thread_modes_active() { return mode_stack.active > 0; }

ModesOffGuard::ModesOffGuard() : active_(mode_stack.active), global_visible_(mode_stack.global_visible) {
  mode_stack.active = 0;
  mode_stack.global_visible = false;
}

ModesOffGuard::~ModesOffGuard() {
  mode_stack.active = active_;
  mode_stack.global_visible = global_visible_;
}

std::vector<Tensor> dispatch(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                             std::span<const Tensor> out) {
  ModeStack& st = mode_stack;
  if (st.active > 0) {
    DispatchMode* mode = st.modes[st.active - 1];
    Visibility restore(st);
    --st.active;
    return mode->on_op(op, inputs, attrs, out);
  }
  if (st.global_visible) {
    if (DispatchMode* g = global_mode.load(std::memory_order_acquire)) {
      Visibility restore(st);
      st.global_visible = false;
      return g->on_op(op, inputs, attrs, out);
    }
  }
  return run_kernel(op, inputs, attrs, out);
}

Tensor dispatch1(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                 std::span<const Tensor> out) {
  auto r = dispatch(op, inputs, attrs, out);
  return r.empty() ? Tensor() : r[0];
}

// ---- devices

namespace {

// The device of an op's inputs. A 0-dim CPU tensor (a C++ number, a loss
// scale) goes with tensors on any device, as in PyTorch; it decides only
// when every input is one.
std::optional<Device> inputs_device(const OpDef& op, std::span<const Tensor> inputs) {
  std::optional<Device> dev, scalar_dev;
  for (const Tensor& t : inputs) {
    const Device d = t.impl()->device;  // (defined: checked by the caller)
    if (d.is_cpu() && t.impl()->sizes.empty()) {
      scalar_dev = d;
      continue;
    }
    if (!dev) dev = d;
    else if (*dev != d) {
      std::string devices;
      for (const Tensor& u : inputs) devices += (devices.empty() ? "" : ", ") + u.device().str();
      fail(op.name.c_str(), "expected all tensors to be on the same device, but got tensors on ", devices);
    }
  }
  return dev ? dev : scalar_dev;
}

// output_metas, and the device whose kernel computes them: the inputs'
// (a factory's: its output's).
inline std::vector<TensorMeta> metas_on_device(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                                        Device& kernel_device) {
  for (const Tensor& t : inputs)
    check(t.defined(), op.name.c_str(), "got an undefined tensor as input");
  std::vector<TensorMeta> metas = op.shape(inputs, attrs);
  const std::optional<Device> from_inputs = inputs_device(op, inputs);
  const Device dev = from_inputs ? *from_inputs : default_device();
  for (TensorMeta& m : metas)
    if (!m.device) m.device = dev;
  kernel_device = from_inputs ? *from_inputs : metas.empty() ? dev : *metas[0].device;
  return metas;
}

}  // namespace

std::vector<TensorMeta> output_metas(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  Device unused;
  return metas_on_device(op, inputs, attrs, unused);
}

// ---- kernels

Tensor empty_output(TensorMeta m) {
  const TensorOptions options = TensorOptions(m.dtype).device(m.device.value_or(default_device()));
  if (m.strides.empty()) return empty(std::move(m.sizes), options);
  return empty_strided(std::move(m.sizes), std::move(m.strides), options);
}

namespace {

// A view op's outputs: the input's storage with the shape function's layout.
std::vector<Tensor> make_views(const OpDef& op, const Tensor& input, std::vector<TensorMeta>& metas) {
  std::vector<Tensor> views;
  for (TensorMeta& m : metas) {
    const TensorImpl* base = input.impl();
    auto impl = restrided(*base, std::move(m.sizes), std::move(m.strides), m.storage_offset, op.name.c_str());
    impl->is_view = true;
    impl->view_base = base->is_view ? base->view_base : input.impl_ptr();
    views.emplace_back(std::move(impl));
  }
  return views;
}

// The tensors the kernel writes: fresh ones, or the out= tensors once they
// are checked against the results. An out= tensor sharing memory with an
// input in another layout would be read after being written: it gets a
// temporary, and (tensor, temporary) goes into copy_back.
std::vector<Tensor> kernel_outputs(const OpDef& op, std::span<const Tensor> inputs, std::vector<TensorMeta>& metas,
                                   std::span<const Tensor> out, std::vector<std::pair<Tensor, Tensor>>& copy_back) {
  std::vector<Tensor> outputs;
  outputs.reserve(metas.size());
  for (const TensorMeta& m : metas) shape_nbytes(m.sizes, m.dtype, op.name.c_str());  // Note [Checked sizes]
  if (out.empty()) {
    // (The sizes move into the outputs: nothing after reads them.)
    for (TensorMeta& m : metas) outputs.push_back(empty_output(std::move(m)));
    return outputs;
  }
  check(out.size() == metas.size(), op.name.c_str(), "expected ", metas.size(), " out= tensors but got ", out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const Tensor& o = out[i];
    check(o.defined(), op.name.c_str(), "got an undefined out= tensor");
    check(o.sizes() == metas[i].sizes, op.name.c_str(), "out= tensor has shape ", shape_text(o.sizes()),
          " but the result has shape ", shape_text(metas[i].sizes));
    check(o.dtype() == metas[i].dtype, op.name.c_str(), "out= tensor has dtype ", o.dtype(),
          " but the result has dtype ", metas[i].dtype);
    check(o.device() == *metas[i].device, op.name.c_str(), "out= tensor is on device ", o.device(),
          " but the result is on device ", *metas[i].device);
    bool overlaps = false;
    for (const Tensor& in : inputs)
      if (in.impl()->storage == o.impl()->storage && !same_layout(in, o)) overlaps = true;
    if (overlaps) {
      Tensor tmp = empty(metas[i].sizes, TensorOptions(metas[i].dtype).device(*metas[i].device));
      copy_back.emplace_back(o, tmp);
      outputs.push_back(tmp);
    } else {
      outputs.push_back(o);
    }
  }
  return outputs;
}

// Runs the kernel for dev on the outputs: on the kernel's device for the
// factories it calls, hidden from the modes, timed by the profiler when on.
void call_kernel(const OpDef& op, Device dev, std::span<const Tensor> inputs, const Attrs& attrs,
                 std::vector<Tensor>& outputs) {
  KernelFn kernel = op.kernels[static_cast<int>(dev.type())];
  check(kernel != nullptr, op.name.c_str(), "has no kernel for device ", dev);
  // Factories a kernel calls (temporaries) allocate on the kernel's device,
  // whatever default this thread set for user code (a guard only then:
  // this runs for every op).
  std::optional<DefaultDeviceGuard> kernel_device;
  if (default_device() != dev) kernel_device.emplace(dev);
  // Ops a kernel calls internally (a dtype conversion, a temporary) are
  // implementation details: they run directly, never seen by modes.
  Visibility restore(mode_stack);
  mode_stack.active = 0;
  mode_stack.global_visible = false;
  // The profiler times the outermost kernel only (ops a kernel calls are part of it).
  static thread_local int kernel_depth = 0;
  const bool timed = kernel_depth == 0 && profiler::enabled();
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  ++kernel_depth;
  try {
    kernel(OpCall{inputs, attrs, std::span<Tensor>(outputs)});
  } catch (...) {
    --kernel_depth;
    throw;
  }
  --kernel_depth;
  if (timed) {
    std::string key = op.name;
    for (const Tensor& t : inputs) key.append(" ").append(shape_str(t.sizes())).append(t.is_contiguous() ? "" : "nc");
    profiler::detail::record(std::move(key),
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

// What an op with out= tensors returns: those tensors, their versions bumped.
std::vector<Tensor> written_out(std::span<const Tensor> out) {
  std::vector<Tensor> result(out.begin(), out.end());
  for (const Tensor& o : result) o.bump_version();
  return result;
}

}  // namespace

std::vector<Tensor> run_kernel(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                               std::span<const Tensor> out) {
  Device dev;
  std::vector<TensorMeta> metas = metas_on_device(op, inputs, attrs, dev);
  if (op.kind == OpKind::View) return make_views(op, inputs[0], metas);
  std::vector<std::pair<Tensor, Tensor>> copy_back;
  std::vector<Tensor> outputs = kernel_outputs(op, inputs, metas, out, copy_back);
  // On meta there is nothing to compute: the outputs' metadata is the
  // whole result.
  bool to_meta = dev.is_meta();
  for (const Tensor& o : outputs) to_meta = to_meta || o.device().is_meta();
  if (to_meta) {
    for (const Tensor& o : outputs)
      check(o.device().is_meta(), op.name.c_str(), "cannot compute a tensor on ", o.device(),
            " from tensors on the meta device, which have no data");
    return out.empty() ? outputs : written_out(out);
  }
  call_kernel(op, dev, inputs, attrs, outputs);
  if (!copy_back.empty()) {  // through the copy op's kernel (the dispatcher calls no op front end)
    static const OpDef* const to_copy = find_op("_to_copy");
    for (auto& [dst, tmp] : copy_back) {
      const Tensor src[] = {tmp}, dsts[] = {dst};
      run_kernel(*to_copy, src, {{"dtype", dst.dtype()}, {"device", dst.device()}}, dsts);
    }
  }
  return out.empty() ? outputs : written_out(out);
}

}  // namespace kiln
