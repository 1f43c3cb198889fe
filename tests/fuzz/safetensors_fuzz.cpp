// libFuzzer target: the safetensors reader, from memory and from a mapped
// file. Every input must load or be refused with a kiln::Error.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    kiln::fuzz::touch(kiln::io::parse_safetensors(bytes).tensors);
  } catch (const kiln::Error&) {
  }
  const std::string path = kiln::fuzz::write_input("st", data, size);
  try {
    kiln::fuzz::touch(kiln::io::load_safetensors(path).tensors);
  } catch (const kiln::Error&) {
  }
  return 0;
}
