// See progress.h.
#include "progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace kiln::cli {

std::string hms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lldm%02ds", static_cast<long long>(s) / 60, static_cast<int>(std::fmod(s, 60)));
  return buf;
}

Progress::Progress() : tty_(::isatty(STDERR_FILENO) == 1) {}

void Progress::report(int64_t step, int64_t steps, double loss, double rate, const char* rate_unit, double elapsed,
                      double eta, bool force) {
  if (!tty_ && !force && elapsed - last_ < kPlainEvery) return;
  last_ = elapsed;
  std::fprintf(stderr, "%sstep %lld/%lld | loss %.3f | %.0f %s | ETA %s%s", tty_ ? "\r" : "",
               static_cast<long long>(step), static_cast<long long>(steps), loss, rate, rate_unit, hms(eta).c_str(),
               tty_ ? "   " : "\n");
}

void Progress::end_line() {
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace kiln::cli
