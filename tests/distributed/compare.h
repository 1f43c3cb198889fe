// The comparison of the distributed tests: a result against a float64
// reference rounded once to the result's dtype, within 1e-6 (float32) or
// 1e-2 (16-bit floats) relative and absolute, exactly for integers; NaN
// and infinities must match.
#pragma once
#include <string>

#include "test_util.h"

namespace kiln::test {

inline void expect_matches(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const DType dt = got.dtype();
  const double tol = dt == kFloat32 ? 1e-6 : is_floating(dt) ? 1e-2 : 0;
  expect_close(got, values(want.to(dt)), tol, tol, what);
}

}  // namespace kiln::test
