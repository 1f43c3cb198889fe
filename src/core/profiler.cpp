// The op profiler's table (kiln/profiler.h).
#include "kiln/profiler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>

namespace kiln::profiler {
namespace {

struct Table {
  std::mutex mu;
  std::map<std::string, OpStats> entries;
  std::atomic<bool> on{false};
  bool print_at_exit = false;
  Table() {
    const char* e = std::getenv("KILN_PROFILE");
    if (e && std::string_view(e).find("ops") != std::string_view::npos) on = print_at_exit = true;
  }
  ~Table() {
    if (print_at_exit) std::fputs(summary().c_str(), stderr);
  }
};
Table& table() {
  static Table t;
  return t;
}

}  // namespace

void enable(bool on) { table().on = on; }
bool enabled() { return table().on.load(std::memory_order_relaxed); }

void reset() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.entries.clear();
}

std::vector<OpStats> op_stats() {
  Table& t = table();
  std::vector<OpStats> out;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    for (const auto& [key, s] : t.entries) out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) { return a.seconds > b.seconds; });
  return out;
}

std::string summary(size_t top) {
  const std::vector<OpStats> stats = op_stats();
  double total = 0;
  for (const OpStats& s : stats) total += s.seconds;
  std::ostringstream o;
  char line[64];
  std::snprintf(line, sizeof line, "[kiln.profile] %.3f ms in kernels\n", total * 1e3);
  o << line;
  for (size_t i = 0; i < stats.size() && i < top; ++i) {
    std::snprintf(line, sizeof line, "%10.3f ms %8lld  ", stats[i].seconds * 1e3, static_cast<long long>(stats[i].calls));
    o << line << stats[i].key << "\n";
  }
  return o.str();
}

namespace detail {
void record(std::string key, double seconds) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  OpStats& s = t.entries[key];
  if (s.key.empty()) s.key = std::move(key);
  s.calls++;
  s.seconds += seconds;
}
}  // namespace detail

}  // namespace kiln::profiler
