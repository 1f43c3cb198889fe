// `kiln`: the command-line front end of the library (tools/kiln/app.h).
#include "app.h"

int main(int argc, char** argv) { return kiln::cli::run_cli(argc, argv); }
