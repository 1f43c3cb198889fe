// Strict numeric options for the CLI: CLI11 2.1 reads integers with
// strtoll in base 0 (so "010" is 8, "0x10" is 16, an overflow is clamped
// and "-1" wraps into an unsigned target) and accepts inf and nan as reals.
// These read whole decimal numbers in a stated range, and every bad value is
// a CLI::ValidationError naming the flag.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <string>

namespace kiln::cli {

CLI::Option* add_int_flag(CLI::App& cmd, const std::string& name, int64_t& target, int64_t lo, int64_t hi,
                          const std::string& description);
// A finite real in [lo, hi].
CLI::Option* add_real_flag(CLI::App& cmd, const std::string& name, double& target, double lo, double hi,
                           const std::string& description);

inline constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();

}  // namespace kiln::cli
