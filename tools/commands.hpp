// Subcommand registry of the CLI. Each tools/cmd_<name>.cpp registers itself with
// ABLATE_COMMAND, so adding a command touches no other file.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <tbb/global_control.h>

#include "ablate/options.hpp"

namespace ablate {
struct LoadedRun;
}

namespace ablate::cli {

// Bad command-line usage: printed with a pointer to --help, exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Command {
  std::string summary;
  std::function<int(const std::vector<std::string>&)> run;
};

std::map<std::string, Command>& commands();
const char* version();

struct Registrar {
  Registrar(const std::string& name, const std::string& summary,
            std::function<int(const std::vector<std::string>&)> fn) {
    commands()[name] = Command{summary, std::move(fn)};
  }
};

// Parses args with the given options and positionals; --help prints usage and returns
// false. Unknown or malformed options become UsageError with a did-you-mean.
bool parse(const std::vector<std::string>& args, const std::string& usage_line,
           boost::program_options::options_description& opts,
           const boost::program_options::positional_options_description& pos,
           boost::program_options::variables_map& vm);

// Command-line flags as options, for plugins that read them as they read YAML:
// "--train-count 5", "--train-count=5" -> train_count: 5; a flag without a value is true; a
// repeated flag is a list. Errors name the flag as given ("command-line override '--x 5'").
Options flag_options(const std::vector<std::string>& args, const std::string& command);

// "a,b,c" of a list-valued option -> {a, b, c}. UsageError naming the option when an item is
// empty ("a,,b", "a,").
std::vector<std::string> comma_list(const std::string& option, const std::string& value);

// The directory an output file goes to must exist: checked before any work, so that a
// long report or inspection does not fail at its end. UsageError naming the flag and the fix.
void require_output_dir(const std::string& flag, const std::string& file);

// Writes an output file whole; Error with the system's reason (disk full, permission) otherwise.
void write_output(const std::string& file, const std::string& text);

// The worker-thread limit of a command's --threads N (0: every core, no limit), held while the
// result lives. UsageError for a negative N.
std::unique_ptr<tbb::global_control> thread_limit(const boost::program_options::variables_map& vm);

// Applies --plugin-dir values to the registry.
void add_plugin_dirs(const boost::program_options::variables_map& vm);

// The precision of the graphs made from now on for `run` (set_default_precision): `flag`, the
// value of --precision, unless empty, else the run's train.precision. Prints bf16_notice() on
// stderr for bf16 without the dot-product kernel. UsageError naming --precision for a value
// other than float32 or bf16.
void use_precision(const LoadedRun& run, const std::string& flag);

}  // namespace ablate::cli

#define ABLATE_COMMAND(name, summary, fn) \
  static ::ablate::cli::Registrar ABLATE_PLUGIN_CAT(ablate_cmd_, __LINE__)(name, summary, fn)
#ifndef ABLATE_PLUGIN_CAT
#define ABLATE_PLUGIN_CAT2(a, b) a##b
#define ABLATE_PLUGIN_CAT(a, b) ABLATE_PLUGIN_CAT2(a, b)
#endif
