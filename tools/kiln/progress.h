// Training progress on stderr: on a terminal one line rewritten in place,
// elsewhere (a log file, a pipe) a plain line every few seconds.
#pragma once
#include <cstdint>
#include <string>

namespace kiln::cli {

// Seconds as "12m05s".
std::string hms(double seconds);

class Progress {
 public:
  Progress();
  // "step 40/1300 | loss 2.311 | 5120 tok/s | ETA 3m10s"; rate_unit names the rate.
  void report(int64_t step, int64_t steps, double loss, double rate, const char* rate_unit, double elapsed, double eta,
              bool force);
  void end_line();  // ends the rewritten line before other output

 private:
  static constexpr double kPlainEvery = 5.0;
  bool tty_;
  double last_ = -kPlainEvery;
};

}  // namespace kiln::cli
