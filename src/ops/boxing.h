// The boxed form of a C++ function for call_op: boxed<F> unboxes each
// argument (already bound and type-checked against the schema by call_op)
// to F's parameter type, calls F and boxes its results.
//
//   def<&add>("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
//   def<[](const Tensor& a, Scalar b) { return a + b; }>("add.Scalar(Tensor self, Scalar other) -> Tensor");
#pragma once
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/call_op.h"

namespace kiln::ops {

template <class T>
struct Unbox;

template <>
struct Unbox<Tensor> {
  static Tensor from(IValue& v) {
    if (std::holds_alternative<std::monostate>(v)) return Tensor();  // `Tensor?` given None
    return std::get<Tensor>(std::move(v));
  }
};
template <class T>
struct UnboxAs {  // a value held as T in the IValue
  static T from(IValue& v) { return std::get<T>(std::move(v)); }
};
template <> struct Unbox<std::vector<Tensor>> : UnboxAs<std::vector<Tensor>> {};
template <> struct Unbox<int64_t> : UnboxAs<int64_t> {};
template <> struct Unbox<double> : UnboxAs<double> {};
template <> struct Unbox<bool> : UnboxAs<bool> {};
template <> struct Unbox<Shape> : UnboxAs<Shape> {};
template <> struct Unbox<std::string> : UnboxAs<std::string> {};
template <> struct Unbox<DType> : UnboxAs<DType> {};
template <> struct Unbox<Device> : UnboxAs<Device> {};
template <>
struct Unbox<Scalar> {
  static Scalar from(IValue& v) {
    if (const auto* i = std::get_if<int64_t>(&v)) return Scalar(*i);
    if (const auto* b = std::get_if<bool>(&v)) return Scalar(*b);
    return Scalar(std::get<double>(v));
  }
};
template <class T>
struct Unbox<std::optional<T>> {
  static std::optional<T> from(IValue& v) {
    if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
    return Unbox<T>::from(v);
  }
};

inline void box_into(std::vector<IValue>& out, Tensor t) { out.emplace_back(std::move(t)); }
inline void box_into(std::vector<IValue>& out, std::vector<Tensor> l) { out.emplace_back(std::move(l)); }
inline void box_into(std::vector<IValue>& out, DType d) { out.emplace_back(d); }
template <class... T>
void box_into(std::vector<IValue>& out, std::tuple<T...> t) {
  std::apply([&](auto&... x) { (box_into(out, std::move(x)), ...); }, t);
}

// The result and parameter types of a function pointer or a captureless
// lambda (passed as the lambda itself: GCC refuses a lambda's function
// pointer as a template argument, since the function it points to has no
// linkage).
template <class F>
struct Signature : Signature<decltype(&F::operator())> {};
template <class R, class... A>
struct Signature<R (*)(A...)> {
  using Result = R;
  using Args = std::tuple<std::remove_cvref_t<A>...>;
};
template <class C, class R, class... A>
struct Signature<R (C::*)(A...) const> : Signature<R (*)(A...)> {};

template <auto F>
std::vector<IValue> boxed(std::vector<IValue>& args) {
  using Sig = Signature<decltype(F)>;
  constexpr size_t n = std::tuple_size_v<typename Sig::Args>;
  check(args.size() == n, "call_op", "a boxed function of ", n, " parameters got ", args.size(), " arguments");
  std::vector<IValue> out;
  [&]<size_t... I>(std::index_sequence<I...>) {
    if constexpr (std::is_void_v<typename Sig::Result>) {
      F(Unbox<std::tuple_element_t<I, typename Sig::Args>>::from(args[I])...);
    } else {
      box_into(out, F(Unbox<std::tuple_element_t<I, typename Sig::Args>>::from(args[I])...));
    }
  }(std::make_index_sequence<n>{});
  return out;
}

// Registers F under `schema`, whose arguments are F's parameters in order.
template <auto F>
void def(std::string_view schema) {
  constexpr size_t n = std::tuple_size_v<typename Signature<decltype(F)>::Args>;
  const size_t params = parse_schema(schema).arguments.size();
  check(params == n, "register_public_op", "'", schema, "' has ", params, " arguments but its function ", n,
        " parameters");
  register_public_op(schema, &boxed<F>);
}

}  // namespace kiln::ops
