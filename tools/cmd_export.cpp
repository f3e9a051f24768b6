// ablate export RUN --csv: a run's per-step metrics as CSV (every table joined on step, or
// one table), to a file or stdout, for pandas, R or a spreadsheet.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "ablate/compare.hpp"
#include "ablate/error.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

static int cmd_export(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()
    ("run", po::value<std::string>(), "run directory (or its run.h5)")
    ("csv", po::bool_switch(), "write CSV (the only format, and the default)")
    ("table,t", po::value<std::string>(), "one table (train, eval, eval/arithmetic, ...); default: every table joined on step")
    ("out,o", po::value<std::string>(), "file to write (default: standard output)");
  po::positional_options_description pos;
  pos.add("run", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate export RUN [--csv] [--table T] [-o FILE]", opts, pos, vm)) return 0;
  if (!vm.count("run")) throw ablate::cli::UsageError("missing the run directory (e.g. runs/quickstart)");
  namespace fs = std::filesystem;
  const std::string run = vm["run"].as<std::string>();
  const std::string file = fs::is_directory(run) ? ablate::run_file_path(run) : run;
  if (vm.count("out")) ablate::cli::require_output_dir("-o", vm["out"].as<std::string>());
  if (!fs::exists(file))
    throw ablate::Error(run + ": no run file (" + file + " does not exist); give a run directory written by 'ablate run' (e.g. runs/quickstart)");
  const std::string csv = ablate::metrics_csv(ablate::read_run_file(file), vm.count("table") ? vm["table"].as<std::string>() : "", run);
  if (!vm.count("out")) {
    std::cout << csv;
    return 0;
  }
  const std::string out = vm["out"].as<std::string>();
  ablate::cli::write_output(out, csv);
  std::cerr << "export: " << out << " (" << std::count(csv.begin(), csv.end(), '\n') - 1 << " rows)\n";
  return 0;
}

ABLATE_COMMAND("export", "write a run's per-step metrics (train, eval and evaluator tables) as CSV", cmd_export);
