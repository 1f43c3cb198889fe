// An op-level profiler: time and call count of every kernel the dispatcher
// runs (and of every generated loop of kiln::compile), by op and input
// shapes. Set KILN_PROFILE=ops to print the table to stderr when the process
// exits, or turn it on in code. For finding where a step's time goes; the
// timer adds a clock read per op while on, nothing while off.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::profiler {

struct OpStats {
  std::string key;  // "op [sizes] [sizes]nc ..." (nc: a non-contiguous input)
  int64_t calls = 0;
  double seconds = 0;
};

void enable(bool on);
bool enabled();
void reset();
// Entries by total time, longest first.
std::vector<OpStats> op_stats();
// The first `top` entries as a table, with the total.
std::string summary(size_t top = 40);

namespace detail {
// Adds one timed call (the dispatcher and the compile backend call it).
void record(std::string key, double seconds);
}  // namespace detail

}  // namespace kiln::profiler

KILN_API_END
