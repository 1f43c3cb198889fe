// The .npy format in memory, shared by load_npy / save_npy and the .npz
// archive (a zip of .npy members).
#pragma once
#include <string>

#include "kiln/tensor.h"

namespace kiln::io {

// The tensor a .npy file's bytes hold; errors name `op` and `path` (the
// file, or archive/member).
Tensor npy_from_bytes(const std::string& bytes, const std::string& path, const char* op);
// A .npy file (version 1.0, C order) of t.
std::string npy_bytes(const Tensor& t, const char* op);

}  // namespace kiln::io
