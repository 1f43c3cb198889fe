// The cpp backend's toolchain (cpp_toolchain.h).
#include "cpp_toolchain.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "kiln/compile.h"

namespace kiln::compiler::detail {
namespace {

std::string cache_dir() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln";
}

void make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
}

std::atomic<int64_t> compiler_run_count{0};

// Loaded shared objects by cache file, while some plan uses them.
std::mutex so_mu;
std::map<std::string, std::weak_ptr<SharedObject>>& loaded() {
  static std::map<std::string, std::weak_ptr<SharedObject>> m;
  return m;
}

// What -march=native compiles for: the CPU's model and feature flags (x86
// "model name" and "flags", Arm "CPU part" and "Features"). Part of the
// disk cache key, so a cache directory shared between machines (a home on
// NFS) never hands one CPU code built for another's instructions (SIGILL).
const std::string& cpu_identity() {
  static const std::string id = [] {
    std::ifstream info("/proc/cpuinfo");
    std::string line, out;
    while (std::getline(info, line)) {
      const std::string key = line.substr(0, line.find(':'));
      for (const char* want : {"model name", "flags", "CPU implementer", "CPU part", "Features"})
        if (key.rfind(want, 0) == 0 && out.find(line) == std::string::npos) out += line + "\n";
    }
    return out;
  }();
  return id;
}

// What `cxx --version` prints, once per compiler per process: part of the
// disk cache key, so code one compiler built (an upgrade, another KILN_CXX)
// is not taken for another's. Empty when the compiler does not run (the
// build then fails and says so).
std::string compiler_identity(const std::string& cxx) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(cxx); it != known.end()) return it->second;
  std::string out;
  if (FILE* f = ::popen((cxx + " --version 2>/dev/null").c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    ::pclose(f);
  }
  return known[cxx] = out;
}

}  // namespace

std::shared_ptr<SharedObject> load_or_build(const std::string& source, std::string* warning) {
  const char* cxx_env = std::getenv("KILN_CXX");
  const std::string cxx = cxx_env && *cxx_env ? cxx_env : "c++";
  // -ffp-contract=off: eager rounds a * b before adding c, and so must the
  // loop (an FMA would keep a * b = 4e38 finite where eager overflows).
  // KILN_CXX_MARCH: the -march value (default native; a cross compiler,
  // which cannot ask the CPU it runs on, names one: armv8-a under qemu).
  const char* march_env = std::getenv("KILN_CXX_MARCH");
  const std::string march = march_env && *march_env ? march_env : "native";
  const std::string flags = "-O3 -march=" + march +
                            " -ffp-contract=off -fno-math-errno -fno-trapping-math -fopenmp-simd -shared -fPIC";
  // libm for pow and fmod only: every other function is in the source.
  const std::string libs = "-lm";
  char hash[32];
  std::snprintf(hash, sizeof hash, "%016zx",
                std::hash<std::string>{}(source + "\n" + cxx + "\n" + compiler_identity(cxx) + "\n" + flags + "\n" +
                                         cpu_identity()));
  const std::string dir = cache_dir(), so = dir + "/" + hash + ".so";
  std::lock_guard<std::mutex> lock(so_mu);
  if (auto it = loaded().find(so); it != loaded().end())
    if (std::shared_ptr<SharedObject> open = it->second.lock()) return open;
  if (::access(so.c_str(), R_OK) != 0) {
    make_dirs(dir);
    const std::string tmp = dir + "/" + hash + "." + std::to_string(::getpid()) + ".tmp";
    {
      std::ofstream f(tmp + ".cpp");
      f << source;
    }
    const std::string cmd = cxx + " " + flags + " -o " + tmp + ".so " + tmp + ".cpp " + libs + " 2>" + tmp + ".log";
    compiler_run_count++;
    const int rc = std::system(cmd.c_str());
    std::ifstream log(tmp + ".log");
    const std::string diag((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    std::remove((tmp + ".cpp").c_str());
    std::remove((tmp + ".log").c_str());
    if (rc != 0) {
      std::remove((tmp + ".so").c_str());
      *warning = "the C++ compiler failed (" + cmd + "): " + diag.substr(0, 300) + "; running the graph with the interpreter";
      return nullptr;
    }
    std::rename((tmp + ".so").c_str(), so.c_str());  // atomic: readers see all of it or nothing
  }
  void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    *warning = std::string("cannot load ") + so + ": " + ::dlerror() + "; running the graph with the interpreter";
    return nullptr;
  }
  auto opened = std::make_shared<SharedObject>(h);
  std::erase_if(loaded(), [](const auto& entry) { return entry.second.expired(); });
  loaded()[so] = opened;
  return opened;
}

int64_t compiler_runs() { return compiler_run_count.load(); }

}  // namespace kiln::compiler::detail
