// `kiln info`: version, architecture and CPU features, CPU capability (chosen
// and available), SIMD targets and kernel variants, threads, BLAS; with
// --ops, the op registries instead.
#include <algorithm>
#include <iostream>

#include "commands.h"
#include "kiln/kiln.h"

namespace kiln::cli {

namespace {

// Every public op by name with its schema (what call_op, the stable ABI and
// the bindings see), then every dispatcher op: its schema, whether it has a
// gradient, whether kiln::compile fuses it, which devices have kernels.
void print_ops() {
  std::vector<const PublicOp*> pub = public_ops();
  std::sort(pub.begin(), pub.end(), [](const PublicOp* a, const PublicOp* b) { return a->name < b->name; });
  std::cout << "public ops (kiln::<name>, call_op): " << pub.size() << "\n";
  for (const PublicOp* op : pub) std::cout << "  " << schema_text(op->schema) << "\n";
  std::vector<const OpDef*> ops = all_ops();
  std::sort(ops.begin(), ops.end(), [](const OpDef* a, const OpDef* b) { return a->name < b->name; });
  std::cout << "dispatcher ops: " << ops.size()
            << " (grad: has a backward formula; fused: kiln::compile's cpp backend fuses it; kernels: devices)\n";
  for (const OpDef* op : ops) {
    const bool grad = op->backward && op->backward->fn;
    std::string kernels;
    for (int d = 0; d < kNumDeviceTypes; ++d)
      if (op->kernels[static_cast<size_t>(d)])
        kernels += (kernels.empty() ? "" : ",") + std::string(device_type_name(static_cast<DeviceType>(d)));
    if (op->kind == OpKind::View) kernels = "view";
    std::cout << "  " << op->schema << "  [" << (grad ? "grad" : "no grad")
              << (compiler::fuses(op->name) ? ", fused" : "") << ", kernels: " << (kernels.empty() ? "none" : kernels)
              << "]\n";
  }
}

}  // namespace

void add_info(CLI::App& app, bool execute) {
  auto* cmd = app.add_subcommand("info", "print version, CPU capability, threads and BLAS");
  auto ops = std::make_shared<bool>(false);
  cmd->add_flag("--ops", *ops,
                "list the ops instead: every public op's schema, every dispatcher op's gradient, "
                "fusion and kernels");
  cmd->callback([execute, ops] {
    if (!execute) return;
    if (*ops) return print_ops();
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
