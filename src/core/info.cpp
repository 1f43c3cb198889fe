// Version and build facts reported by `kiln info`.
#include <cblas.h>

#include <string>

#include "kiln/runtime.h"

namespace kiln {

std::string version() { return KILN_VERSION; }

std::string blas_info() {
  std::string s = "OpenBLAS ";
  s += openblas_get_config();
  s += " (core ";
  s += openblas_get_corename();
  const int threads = openblas_get_num_threads();
  s += ", " + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
  return s;
}

}  // namespace kiln
