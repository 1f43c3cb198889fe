// `kiln info`: version, CPU capability (chosen and available), threads, BLAS.
#include <iostream>

#include "commands.h"
#include "kiln/kiln.h"

namespace kiln::cli {

void add_info(CLI::App& app, bool execute) {
  auto* cmd = app.add_subcommand("info", "print version, CPU capability, threads and BLAS");
  cmd->callback([execute] {
    if (!execute) return;
    std::cout << "kiln " << version() << "\n";
    std::cout << "cpu capability: " << capability_name(cpu_capability()) << "\n";
    std::cout << "available:";
    for (Capability c : available_capabilities()) std::cout << " " << capability_name(c);
    std::cout << "\nthreads: " << get_num_threads() << "\n";
    std::cout << "blas: " << blas_info() << "\n";
    std::cout << "ops registered: " << all_ops().size() << "\n";
  });
}

}  // namespace kiln::cli
