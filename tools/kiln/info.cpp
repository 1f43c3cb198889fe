// `kiln info`: version, architecture and CPU features, CPU capability (chosen
// and available), SIMD targets and kernel variants, threads, BLAS.
#include <iostream>

#include "commands.h"
#include "kiln/kiln.h"

namespace kiln::cli {

void add_info(CLI::App& app, bool execute) {
  auto* cmd = app.add_subcommand("info", "print version, CPU capability, threads and BLAS");
  cmd->callback([execute] {
    if (!execute) return;
    std::cout << "kiln " << version() << "\n";
    std::cout << "architecture: " << cpu_architecture() << "\n";
    std::cout << "cpu features:";
    for (const std::string& f : cpu_features()) std::cout << " " << f;
    std::cout << "\ncpu capability: " << capability_name(cpu_capability()) << "\n";
    std::cout << "available:";
    for (Capability c : available_capabilities()) std::cout << " " << capability_name(c);
    std::cout << "\nsimd targets compiled:";
    for (const std::string& t : simd_targets_compiled()) std::cout << " " << t;
    std::cout << "\nsimd target: " << simd_target();
    for (const auto& [family, variant] : kernel_variants()) std::cout << "\n" << family << ": " << variant;
    std::cout << "\nthreads: " << get_num_threads() << "\n";
    std::cout << "blas: " << blas_info() << "\n";
    std::cout << "ops registered: " << all_ops().size() << "\n";
  });
}

}  // namespace kiln::cli
