#include "user_stack.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace kiln::compiler::detail {
namespace {

bool is_runtime(const char* path) {
  for (const char* lib : {"/libc.so", "/libstdc++.so", "/libgcc_s.so", "/ld-linux", "/libgomp.so", "/libm.so"})
    if (std::strstr(path, lib)) return true;
  return false;
}

std::string demangled(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? d.get() : name;
}

}  // namespace

std::vector<std::string> user_stack(int max_frames) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  Dl_info self{};
  dladdr(reinterpret_cast<void*>(&user_stack), &self);
  std::vector<std::string> out;
  for (int i = 1; i < n && static_cast<int>(out.size()) < max_frames; ++i) {
    Dl_info info{};
    if (!dladdr(frames[i], &info) || !info.dli_fname) continue;
    if ((self.dli_fname && !std::strcmp(info.dli_fname, self.dli_fname)) || is_runtime(info.dli_fname)) continue;
    // A return address points after the call: step back into it.
    const auto offset = reinterpret_cast<uintptr_t>(frames[i]) - reinterpret_cast<uintptr_t>(info.dli_fbase) - 1;
    char buf[32];
    std::snprintf(buf, sizeof buf, "+0x%lx", static_cast<unsigned long>(offset));
    std::string frame = std::string(info.dli_fname) + buf;
    if (info.dli_sname) frame += " (" + demangled(info.dli_sname) + ")";
    out.push_back(std::move(frame));
  }
  return out;
}

}  // namespace kiln::compiler::detail
