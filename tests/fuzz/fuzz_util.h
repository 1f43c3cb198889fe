// Shared by the libFuzzer targets: run a reader, accept kiln::Error (bad
// input, refused cleanly), and touch everything it returned so a tensor
// that claims more bytes than it owns is read past (ASan reports it).
// Any other exception escapes and libFuzzer reports it as a crash.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "kiln/kiln.h"

namespace kiln::fuzz {

// Reads every element (through a float64 conversion, where the 80-byte
// file's overflow used to write).
inline void touch(const nn::StateDict& tensors) {
  for (const auto& [name, t] : tensors) {
    const Tensor d = t.to(kFloat64);
    if (d.numel() > 0) (void)sum(d).item<double>();
  }
}

// A file of this process's own, rewritten for each input (the mmap path).
inline std::string write_input(const char* tag, const uint8_t* data, size_t size) {
  const std::string path = "/tmp/kiln-fuzz-" + std::string(tag) + "-" + std::to_string(::getpid()) + ".safetensors";
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                 static_cast<std::streamsize>(size));
  return path;
}

}  // namespace kiln::fuzz
