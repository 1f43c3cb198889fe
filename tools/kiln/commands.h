// Each subcommand of the `kiln` CLI lives in its own file and registers
// itself on the app here. With execute false the subcommand parses and
// checks its flags but does nothing (the argument fuzzer); its callback still
// owns the parsed arguments the flags write into.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kiln::cli {
void add_info(CLI::App& app, bool execute = true);
void add_demo(CLI::App& app, bool execute = true);
void add_train(CLI::App& app, bool execute = true);
void add_generate(CLI::App& app, bool execute = true);
void add_run(CLI::App& app, bool execute = true);

// Runs `command` as ranks 0..nproc-1 of a job on this machine (run.cpp);
// returns how the first failed rank ended ("" when every rank exited 0).
std::string launch_ranks(int nproc, double grace_s, const std::vector<std::string>& command);
}  // namespace kiln::cli
