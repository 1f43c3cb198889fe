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
void add_eval(CLI::App& app, bool execute = true);
void add_run(CLI::App& app, bool execute = true);

// Where this node's ranks sit in a job (run.cpp).
struct JobLayout {
  int nproc = 1, nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";  // where rank 0 serves the job's store
  int master_port = 0;
  int global_rank(int local_rank) const { return node_rank * nproc + local_rank; }
};
// A job of one node: MASTER_ADDR/MASTER_PORT from the environment, else
// 127.0.0.1 and a free port.
JobLayout single_node_job(int nproc);
// Runs `command` as this node's ranks of the job; returns how the first
// failed rank ended ("" when every rank exited 0).
std::string launch_ranks(const JobLayout& job, double grace_s, const std::vector<std::string>& command);
}  // namespace kiln::cli
