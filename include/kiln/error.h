// kiln::Error: the one exception type for bad user input. Messages start with
// the op name in brackets and say what was expected and what was given.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
KILN_HIDDEN std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws kiln::Error("[op] ...") when cond is false. A function, not a macro,
// so the message arguments are only formatted on failure.
template <typename... Args>
inline void check(bool cond, const char* op, const Args&... args) {
  if (!cond) [[unlikely]]
    throw Error(detail::concat("[", op, "] ", args...));
}

template <typename... Args>
[[noreturn]] inline void fail(const char* op, const Args&... args) {
  throw Error(detail::concat("[", op, "] ", args...));
}

}  // namespace kiln

KILN_API_END
