// The registry of compile backends (graph.h): the stage that turns a
// simplified plan's nodes into faster code, chosen by CompileOptions::backend.
#include <map>
#include <mutex>

#include "graph.h"
#include "kiln/error.h"

namespace kiln::compiler::detail {
namespace {

struct Backends {
  std::mutex mu;
  std::map<std::string, BackendFn> by_name;
};
Backends& backends() {
  static Backends b;
  return b;
}

// Takes no node: every node runs its kernel (the reference the others are
// checked against).
void interpret_all(const Trace&, Plan&, std::string*) {}
const bool interpreter_registered = (register_compile_backend("interpreter", interpret_all), true);

}  // namespace

void register_compile_backend(const std::string& name, BackendFn generate) {
  check(generate != nullptr, "compile", "backend '", name, "' has no generate function");
  Backends& b = backends();
  std::lock_guard<std::mutex> lock(b.mu);
  check(b.by_name.emplace(name, generate).second, "compile", "backend '", name, "' is registered twice");
}

BackendFn compile_backend(const std::string& name) {
  Backends& b = backends();
  std::lock_guard<std::mutex> lock(b.mu);
  if (auto it = b.by_name.find(name); it != b.by_name.end()) return it->second;
  std::string known;
  for (const auto& [n, fn] : b.by_name) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  fail("compile", "unknown backend '", name, "': expected one of ", known);
}

}  // namespace kiln::compiler::detail
