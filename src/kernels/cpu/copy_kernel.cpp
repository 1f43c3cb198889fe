// The converting copy (to, copy_): every pair of dtypes, a unit of its own
// (its 121 loops compile as long as all the fill kernels together).
#include <cstring>

#include "core/convert.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"

namespace kiln::cpu {

void copy_kernel(const OpCall& c) {
  const Tensor& src = c.inputs[0];
  const Tensor& dst = c.outputs[0];
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      if constexpr (std::is_same_v<D, S>) {
        auto plan = make_plan<2>({&dst, &src}, dst.sizes());
        for_each_segment<2>(plan, [&](char* const* p, const int64_t* s, int64_t n) {
          if (s[0] == sizeof(D) && s[1] == sizeof(D)) {
            std::memcpy(p[0], p[1], static_cast<size_t>(n) * sizeof(D));
          } else {
            for (int64_t i = 0; i < n; ++i)
              *reinterpret_cast<D*>(p[0] + i * s[0]) = *reinterpret_cast<const D*>(p[1] + i * s[1]);
          }
        });
      } else {
        map_elementwise<D, S>(dst, {&src}, [](S v) { return convert<D>(v); });
      }
    });
  });
}

}  // namespace kiln::cpu
