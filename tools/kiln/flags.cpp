// See flags.h.
#include "flags.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace kiln::cli {
namespace {

std::string in_range(const std::string& lo, const std::string& hi) { return "[" + lo + ", " + hi + "]"; }

}  // namespace

CLI::Option* add_int_flag(CLI::App& cmd, const std::string& name, int64_t& target, int64_t lo, int64_t hi,
                          const std::string& description) {
  const std::string range = in_range(std::to_string(lo), hi == kIntMax ? "2^63-1" : std::to_string(hi));
  auto* opt = cmd.add_option_function<std::string>(
      name,
      [name, &target, lo, hi, range](const std::string& text) {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [p, ec] = std::from_chars(text.data(), end, v);
        if (text.empty() || p != end || ec == std::errc::invalid_argument)
          throw CLI::ValidationError(name, "'" + text + "' is not a whole decimal number");
        if (ec == std::errc::result_out_of_range || v < lo || v > hi)
          throw CLI::ValidationError(name, text + " is outside " + range);
        target = v;
      },
      description + " (default " + std::to_string(target) + ")");
  opt->type_name("INT in " + range)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  return opt;
}

CLI::Option* add_real_flag(CLI::App& cmd, const std::string& name, double& target, double lo, double hi,
                           const std::string& description) {
  auto num = [](double x) {
    std::ostringstream os;
    os << x;
    return os.str();
  };
  const std::string range = in_range(num(lo), num(hi));
  auto* opt = cmd.add_option_function<std::string>(
      name,
      [name, &target, lo, hi, range](const std::string& text) {
        char* end = nullptr;
        const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size())
          throw CLI::ValidationError(name, "'" + text + "' is not a number");
        if (!std::isfinite(v)) throw CLI::ValidationError(name, text + " is not a finite number");
        if (v < lo || v > hi) throw CLI::ValidationError(name, text + " is outside " + range);
        target = v;
      },
      description + " (default " + num(target) + ")");
  opt->type_name("REAL in " + range)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  return opt;
}

}  // namespace kiln::cli
