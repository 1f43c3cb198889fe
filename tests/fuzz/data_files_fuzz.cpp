// libFuzzer target: the readers of other tools' data files (load_idx, plain
// or gzip; load_npy; load_csv; load_npz) on the same bytes, every element
// touched.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::write_input("data", data, size);
  for (auto load : {+[](const std::string& p) { return kiln::io::load_idx(p); },
                    +[](const std::string& p) { return kiln::io::load_npy(p); },
                    +[](const std::string& p) { return kiln::io::load_csv(p); }}) {
    try {
      kiln::fuzz::touch({{"t", load(path)}});
    } catch (const kiln::Error&) {
    }
  }
  try {
    kiln::fuzz::touch(kiln::io::load_npz(path));
  } catch (const kiln::Error&) {
  }
  return 0;
}
