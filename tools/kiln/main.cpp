// `kiln`: the command-line front end of the library.
#include <iostream>

#include "commands.h"
#include "kiln/error.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: a CPU-first deep-learning framework"};
  app.require_subcommand(1);
  kiln::cli::add_info(app);
  kiln::cli::add_demo(app);
  kiln::cli::add_train(app);
  kiln::cli::add_generate(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
