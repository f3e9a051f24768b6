// ablate export RUN --csv: a run's per-step metrics as CSV (every table joined on step, or
// one table), to a file or stdout, for pandas, R or a spreadsheet.
// ablate export RUN --format safetensors -o FILE: the run's weights with ablate's names;
// --format hf -o DIR: a Hugging Face model directory (docs/INTEROP.md).
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "ablate/compare.hpp"
#include "ablate/error.hpp"
#include "ablate/interop.hpp"
#include "ablate/runfile.hpp"
#include "ablate/trainer.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

static int cmd_export(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("run", po::value<std::string>(),
                     "run directory (or its run.h5; for weights also a checkpoint, a safetensors "
                     "file or a Hugging Face directory)")(
      "csv", po::bool_switch(), "write the metrics as CSV (the default; --format csv)")(
      "format", po::value<std::string>()->default_value("csv"),
      "csv: the metrics; safetensors: the weights with ablate's names (-o FILE); hf: a Hugging "
      "Face model directory (-o DIR)")("plugin-dir",
                                       po::value<std::vector<std::string>>()->composing(),
                                       "extra plugin directory (repeatable)")(
      "table,t", po::value<std::string>(),
      "one table (train, eval, eval/arithmetic, ...); default: every table joined on step")(
      "out,o", po::value<std::string>(), "file to write (default: standard output)");
  po::positional_options_description pos;
  pos.add("run", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args,
                          "ablate export RUN [--csv] [--table T] [-o FILE] | ablate export RUN "
                          "--format safetensors|hf -o PATH",
                          opts, pos, vm))
    return 0;
  if (!vm.count("run"))
    throw ablate::cli::UsageError("missing the run directory (e.g. runs/quickstart)");
  namespace fs = std::filesystem;
  const std::string run = vm["run"].as<std::string>();
  const std::string format = vm["format"].as<std::string>();
  if (format != "csv" && format != "safetensors" && format != "hf")
    throw ablate::cli::UsageError("--format must be csv, safetensors or hf, got '" + format + "'");
  if (format != "csv") {
    if (vm["csv"].as<bool>() || vm.count("table"))
      throw ablate::cli::UsageError("--csv and --table are for --format csv");
    if (!vm.count("out"))
      throw ablate::cli::UsageError(
          "--format " + format + " needs -o " +
          (format == "hf" ? "DIR (the directory to write)" : "FILE.safetensors"));
    ablate::cli::add_plugin_dirs(vm);
    const std::string out = vm["out"].as<std::string>();
    auto loaded = ablate::load_run(run);
    if (format == "safetensors") {
      ablate::cli::require_output_dir("-o", out);
      ablate::export_safetensors(loaded, out);
      std::cerr << "export: " << out << " (" << loaded.model->params().all().size() << " tensors, "
                << loaded.model->n_params() << " parameters, step " << loaded.step << ")\n";
      return 0;
    }
    for (const std::string& note : ablate::export_hf(loaded, out))
      std::cerr << "export: " << out << ": " << note << "\n";
    return 0;
  }
  const std::string file = fs::is_directory(run) ? ablate::run_file_path(run) : run;
  if (vm.count("out")) ablate::cli::require_output_dir("-o", vm["out"].as<std::string>());
  if (!fs::exists(file))
    throw ablate::Error(
        run + ": no run file (" + file +
        " does not exist); give a run directory written by 'ablate run' (e.g. runs/quickstart)");
  const std::string csv = ablate::metrics_csv(
      ablate::read_run_file(file), vm.count("table") ? vm["table"].as<std::string>() : "", run);
  if (!vm.count("out")) {
    std::cout << csv;
    return 0;
  }
  const std::string out = vm["out"].as<std::string>();
  ablate::cli::write_output(out, csv);
  std::cerr << "export: " << out << " (" << std::count(csv.begin(), csv.end(), '\n') - 1
            << " rows)\n";
  return 0;
}

ABLATE_COMMAND("export",
               "write a run's per-step metrics as CSV, or its weights as safetensors or a Hugging "
               "Face model directory",
               cmd_export);
