// ablate compare SWEEP_DIR | RUN... : one metric per run, grouped (by variant, a swept key,
// or an option that differs between the runs given), mean ± std over seeds, t confidence
// intervals, and a paired t-test against a baseline.
#include <filesystem>
#include <iostream>

#include "ablate/compare.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

static int cmd_compare(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()(
      "runs", po::value<std::vector<std::string>>(),
      "a sweep directory (holds manifest.yaml), or run directories, run.h5 files, glob patterns")(
      "metric,m", po::value<std::string>()->default_value("val_loss"),
      "metric column (val_loss, train_loss, loss, exact_match, ...); several, comma-separated "
      "(exact_match,em_add,em_sub): one "
      "table of differences from the baseline, a column per metric")(
      "table,t", po::value<std::string>(),
      "table holding the metric (eval, train, eval/arithmetic; default: found by name)")(
      "at", po::value<std::string>()->default_value("final"), "final | best | step=N")(
      "by", po::value<std::string>(),
      "group by: variant, point, run, or a swept key path / an option that differs between the "
      "runs (default: variant if any)")(
      "baseline,b", po::value<std::string>(),
      "group compared against (default: the sweep's baseline variant)")(
      "format,f", po::value<std::string>()->default_value("table"), "table | markdown | csv")(
      "higher-is-better", po::bool_switch(),
      "larger values are better (default: as the runs declare it, else from the metric name)")(
      "lower-is-better", po::bool_switch(), "smaller values are better")(
      "level", po::value<double>()->default_value(0.95, "0.95"),
      "confidence level of the intervals");
  po::positional_options_description pos;
  pos.add("runs", -1);
  po::variables_map vm;
  if (!ablate::cli::parse(args,
                          "ablate compare SWEEP_DIR | RUN_DIR... [--metric val_loss] [--at "
                          "final|best|step=N] [--by KEY] [options]",
                          opts, pos, vm))
    return 0;
  if (!vm.count("runs"))
    throw ablate::cli::UsageError(
        "missing what to compare: a sweep directory (sweeps/swiglu_vs_relu) or runs (runs/a "
        "runs/b, \"runs/lr*\")");
  if (vm["higher-is-better"].as<bool>() && vm["lower-is-better"].as<bool>())
    throw ablate::cli::UsageError("--higher-is-better and --lower-is-better contradict each other");
  ablate::CompareOptions o;
  if (vm.count("table")) o.table = vm["table"].as<std::string>();
  o.at = vm["at"].as<std::string>();
  if (vm.count("by")) o.by = vm["by"].as<std::string>();
  if (vm.count("baseline")) o.baseline = vm["baseline"].as<std::string>();
  if (vm["higher-is-better"].as<bool>()) o.higher_is_better = 1;
  if (vm["lower-is-better"].as<bool>()) o.higher_is_better = 0;
  o.level = vm["level"].as<double>();
  if (!(o.level > 0 && o.level < 1))
    throw ablate::cli::UsageError("--level must lie in (0, 1), e.g. 0.95");
  const std::string format = vm["format"].as<std::string>();
  if (format != "table" && format != "markdown" && format != "csv")
    throw ablate::cli::UsageError("--format must be table, markdown or csv, got '" + format + "'");
  const auto paths = vm["runs"].as<std::vector<std::string>>();
  namespace fs = std::filesystem;
  // One sweep directory: its variants and grid; anything else: the runs one by one.
  ablate::SweepResults r = paths.size() == 1 && fs::exists(fs::path(paths[0]) / "manifest.yaml")
                               ? ablate::load_sweep_results(paths[0])
                               : ablate::load_run_results(paths);
  std::vector<ablate::Comparison> cs;
  for (const std::string& m : ablate::cli::comma_list("--metric", vm["metric"].as<std::string>())) {
    o.metric = m;
    cs.push_back(ablate::compare_sweep(r, o));
  }
  std::cout << ablate::format_comparisons(cs, format);
  return 0;
}

ABLATE_COMMAND(
    "compare",
    "compare a sweep's runs or any runs: mean ± std over seeds, CIs, paired t-tests vs a baseline",
    cmd_compare);
