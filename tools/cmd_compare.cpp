// ablate compare SWEEP_DIR: one metric per run, grouped (by variant or a swept key),
// mean ± std over seeds, t confidence intervals, and a paired t-test against a baseline.
#include <iostream>

#include "ablate/compare.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

static int cmd_compare(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()
    ("sweep-dir", po::value<std::string>(), "sweep directory (holds manifest.yaml)")
    ("metric,m", po::value<std::string>()->default_value("val_loss"), "metric column (val_loss, train_loss, loss, exact_match, ...)")
    ("table,t", po::value<std::string>(), "table holding the metric (eval, train, eval/arithmetic; default: found by name)")
    ("at", po::value<std::string>()->default_value("final"), "final | best | step=N")
    ("by", po::value<std::string>(), "group by: variant, point, or a swept key path (default: variant if any)")
    ("baseline,b", po::value<std::string>(), "group compared against (default: the sweep's baseline variant)")
    ("format,f", po::value<std::string>()->default_value("table"), "table | markdown | csv")
    ("higher-is-better", po::bool_switch(), "larger values are better (default: from the metric name)")
    ("lower-is-better", po::bool_switch(), "smaller values are better")
    ("level", po::value<double>()->default_value(0.95), "confidence level of the intervals");
  po::positional_options_description pos;
  pos.add("sweep-dir", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate compare SWEEP_DIR [--metric val_loss] [--at final|best|step=N] [--by KEY] [options]", opts, pos, vm))
    return 0;
  if (!vm.count("sweep-dir")) throw ablate::cli::UsageError("missing the sweep directory (e.g. sweeps/swiglu_vs_relu)");
  if (vm["higher-is-better"].as<bool>() && vm["lower-is-better"].as<bool>())
    throw ablate::cli::UsageError("--higher-is-better and --lower-is-better contradict each other");
  ablate::CompareOptions o;
  o.metric = vm["metric"].as<std::string>();
  if (vm.count("table")) o.table = vm["table"].as<std::string>();
  o.at = vm["at"].as<std::string>();
  if (vm.count("by")) o.by = vm["by"].as<std::string>();
  if (vm.count("baseline")) o.baseline = vm["baseline"].as<std::string>();
  if (vm["higher-is-better"].as<bool>()) o.higher_is_better = 1;
  if (vm["lower-is-better"].as<bool>()) o.higher_is_better = 0;
  o.level = vm["level"].as<double>();
  if (!(o.level > 0 && o.level < 1)) throw ablate::cli::UsageError("--level must lie in (0, 1), e.g. 0.95");
  const std::string format = vm["format"].as<std::string>();
  if (format != "table" && format != "markdown" && format != "csv")
    throw ablate::cli::UsageError("--format must be table, markdown or csv, got '" + format + "'");
  ablate::SweepResults r = ablate::load_sweep_results(vm["sweep-dir"].as<std::string>());
  std::cout << ablate::format_comparison(ablate::compare_sweep(r, o), format);
  return 0;
}

ABLATE_COMMAND("compare", "compare a sweep's runs: mean ± std over seeds, CIs, paired t-tests vs a baseline", cmd_compare);
