// kiln::SourceLocation: where a user's call came from (a graph break's
// file:line). std::source_location would do, but clang 14 with libstdc++ 12
// has no <source_location> (it lacks __builtin_source_location), so the
// public headers would not compile with clang; and one type for every
// compiler keeps the library's signatures the same whoever built it.
// __builtin_FILE / __builtin_LINE / __builtin_FUNCTION in a default argument
// of current(), itself a default argument, take the caller's location, as
// std::source_location::current() does.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstdint>

namespace kiln {

class SourceLocation {
 public:
  constexpr SourceLocation() = default;
  static constexpr SourceLocation current(const char* file = __builtin_FILE(), int line = __builtin_LINE(),
                                          const char* function = __builtin_FUNCTION()) noexcept {
    SourceLocation l;
    l.file_ = file, l.line_ = static_cast<uint_least32_t>(line), l.function_ = function;
    return l;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr uint_least32_t line() const noexcept { return line_; }  // 0: unknown

 private:
  const char* file_ = "";
  const char* function_ = "";
  uint_least32_t line_ = 0;
};

}  // namespace kiln

KILN_API_END
