// The `ablate` command: dispatches to one subcommand per file (tools/cmd_*.cpp).
// Library code throws; this is the only place that prints errors and sets the exit code.
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ablate/communicator.hpp"
#include "ablate/error.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  const auto& cmds = ablate::cli::commands();
  auto usage = [&](std::ostream& os) {
    os << "usage: ablate <command> [options]\n\ncommands:\n";
    for (const auto& [name, c] : cmds)
      os << "  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') << c.summary
         << "\n";
    os << "\n'ablate <command> --help' describes a command.\n";
  };
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(std::cout);
    return 0;
  }
  if (name == "--version") {
    std::cout << "ablate " << ablate::cli::version() << "\n";
    return 0;
  }
  auto it = cmds.find(name);
  if (it == cmds.end()) {
    std::vector<std::string> names;
    for (const auto& [n, c] : cmds) names.push_back(n);
    std::string dym = ablate::did_you_mean(name, names);
    std::cerr << "ablate: unknown command '" << name << "'. Available: " << ablate::join(names)
              << (dym.empty() ? "" : ". Did you mean '" + dym + "'?") << "\n";
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  // Under an MPI launcher an error on one rank ends them all: the others may be waiting
  // for it in a collective, and MPI_Finalize would wait for them.
  auto fail = [](int code) {
    if (ablate::launched_by_mpi()) {
      try {
        ablate::world().abort(code);
      } catch (const std::exception&) {
      }
    }
    return code;
  };
  try {
    return it->second.run(args);
  } catch (const ablate::cli::UsageError& e) {
    std::cerr << "ablate " << name << ": " << e.what() << "\n(see 'ablate " << name
              << " --help')\n";
    return fail(2);
  } catch (const ablate::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return fail(1);
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return fail(70);
  }
}
