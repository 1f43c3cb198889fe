// The cpp backend's toolchain: the system C++ compiler run on generated
// source, the shared objects it builds kept in a disk cache keyed by source,
// compiler identity, flags and CPU, and loaded with dlopen.
#pragma once
#include <dlfcn.h>

#include <memory>
#include <string>

namespace kiln::compiler::detail {

// A loaded shared object, closed when the last plan using it goes: a
// process compiling graphs for long (a tester, a server with changing
// shapes) would otherwise run out of memory mappings (vm.max_map_count).
struct SharedObject {
  void* handle;
  explicit SharedObject(void* h) : handle(h) {}
  ~SharedObject() { ::dlclose(handle); }
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
};

// The shared object built from `source`, from the disk cache or compiled
// now; null (and *warning set) when the compiler fails or it cannot load.
std::shared_ptr<SharedObject> load_or_build(const std::string& source, std::string* warning);

}  // namespace kiln::compiler::detail
