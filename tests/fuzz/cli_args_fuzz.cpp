// libFuzzer target: the CLI's argument parser. The input is split at NUL
// bytes into arguments after "kiln"; commands are parsed, never run.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "app.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::ostringstream sink;  // keeps the fuzzer's output readable
  static const bool silenced = [] {
    std::cerr.rdbuf(sink.rdbuf());
    std::cout.rdbuf(sink.rdbuf());
    return true;
  }();
  (void)silenced;
  sink.str({});
  std::vector<std::string> args{"kiln"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 32; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  kiln::cli::run_cli(static_cast<int>(argv.size()), argv.data(), false);
  return 0;
}
