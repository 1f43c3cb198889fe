// See app.h.
#include "app.h"

#include <iostream>
#include <new>

#include "commands.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

std::vector<CLI::App*> subcommands(CLI::App& app) {
  return app.get_subcommands([](CLI::App*) { return true; });
}

// CLI11 reports an unknown first word as "A subcommand is required".
bool is_known_subcommand(CLI::App& app, const std::string& word) {
  for (const CLI::App* sub : subcommands(app))
    if (sub->check_name(word)) return true;
  return false;
}

std::string subcommand_names(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : subcommands(app)) names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

std::vector<std::string>& arguments() {
  static std::vector<std::string> args;
  return args;
}

}  // namespace

const std::vector<std::string>& cli_arguments() { return arguments(); }

int run_cli(int argc, const char* const* argv, bool run_commands) {
  arguments().assign(argv, argv + argc);
  CLI::App app{"kiln: a CPU-first deep-learning framework"};
  app.require_subcommand(1);
  add_info(app, run_commands);
  add_demo(app, run_commands);
  add_train(app, run_commands);
  add_generate(app, run_commands);
  add_eval(app, run_commands);
  add_run(app, run_commands);
  if (argc > 1 && argv[1][0] != '-' && !is_known_subcommand(app, argv[1])) {
    std::cerr << "kiln: unknown command '" << argv[1] << "' (expected one of: " << subcommand_names(app) << ")\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "kiln: " << e.what() << "\n";
    return e.get_exit_code();
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "kiln: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 1;
  } catch (...) {
    std::cerr << "kiln: failed with an exception that is not a std::exception\n";
    return 1;
  }
  return 0;
}

}  // namespace kiln::cli
