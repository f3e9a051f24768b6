// ablate report SWEEP_DIR -o report.html: one self-contained HTML page (inline SVG plots,
// comparison tables, parameter counts, configs) for a sweep, or for any runs.
#include <filesystem>
#include <iostream>

#include "ablate/error.hpp"
#include "ablate/report.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

static int cmd_report(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()(
      "runs", po::value<std::vector<std::string>>(),
      "a sweep directory (holds manifest.yaml), or run directories, run.h5 files, glob patterns")(
      "out,o", po::value<std::string>(),
      "HTML file to write (default: SWEEP_DIR/report.html; required for runs)")(
      "metric,m", po::value<std::string>()->default_value("val_loss"),
      "metric of the main comparison table")("table,t", po::value<std::string>(),
                                             "table holding the metric (default: found by name)")(
      "at", po::value<std::string>()->default_value("final"), "final | best | step=N")(
      "by", po::value<std::string>(),
      "group by: variant, point, run, or a swept key path / an option that differs between the "
      "runs")("baseline,b", po::value<std::string>(), "group compared against")(
      "title", po::value<std::string>(), "page title (default: Sweep <name>)")(
      "x", po::value<std::string>()->default_value("step"),
      "curves' x axis: step | tokens | seconds")(
      "log-x", po::bool_switch(), "log scale on the curves' x axis (step 0 is not drawn)")(
      "log-y", po::bool_switch(), "log scale on the curves' y axis")(
      "seeds", po::bool_switch(), "draw each run's own line (faint) besides the mean over seeds")(
      "plot-width", po::value<int>()->default_value(640),
      "width of each plot in pixels (height: 0.62 x width)")(
      "columns", po::value<std::string>(),
      "evaluator metrics that get a table and a plot, comma-separated, * and ? allowed (e.g. "
      "'exact_match,em_*'; default: all)");
  po::positional_options_description pos;
  pos.add("runs", -1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate report SWEEP_DIR | RUN_DIR... [-o report.html] [options]",
                          opts, pos, vm))
    return 0;
  if (!vm.count("runs"))
    throw ablate::cli::UsageError(
        "missing what to report on: a sweep directory (sweeps/swiglu_vs_relu) or runs (runs/a "
        "runs/b)");
  const auto paths = vm["runs"].as<std::vector<std::string>>();
  const bool sweep = paths.size() == 1 &&
                     std::filesystem::exists(std::filesystem::path(paths[0]) / "manifest.yaml");
  if (!sweep && !vm.count("out"))
    throw ablate::cli::UsageError("a report on runs needs -o FILE (e.g. -o report.html)");
  ablate::ReportOptions o;
  o.compare.metric = vm["metric"].as<std::string>();
  if (vm.count("table")) o.compare.table = vm["table"].as<std::string>();
  o.compare.at = vm["at"].as<std::string>();
  if (vm.count("by")) o.compare.by = vm["by"].as<std::string>();
  if (vm.count("baseline")) o.compare.baseline = vm["baseline"].as<std::string>();
  if (vm.count("title")) o.title = vm["title"].as<std::string>();
  o.x = vm["x"].as<std::string>();
  o.log_x = vm["log-x"].as<bool>();
  o.log_y = vm["log-y"].as<bool>();
  o.seed_lines = vm["seeds"].as<bool>();
  o.plot_width = vm["plot-width"].as<int>();
  if (vm.count("columns"))
    o.columns = ablate::cli::comma_list("--columns", vm["columns"].as<std::string>());
  const std::string out = vm.count("out") ? vm["out"].as<std::string>() : paths[0] + "/report.html";
  ablate::cli::require_output_dir("-o", out);
  ablate::SweepResults r =
      sweep ? ablate::load_sweep_results(paths[0]) : ablate::load_run_results(paths);
  const std::string html = ablate::render_report(r, o);
  ablate::cli::write_output(out, html);
  // The runs by state, as `ablate sweep --status` counts its points: "24 runs: 9 done, 13 missing,
  // 2 running".
  std::vector<std::string> summary;
  for (const auto& [status, n] : ablate::runs_by_state(r))
    summary.push_back(std::to_string(n) + " " + status);
  std::cout << "report: " << out << " (" << html.size() / 1024 + 1 << " KB, " << r.runs.size()
            << " runs: " << ablate::join(summary) << ")\n";
  return 0;
}

ABLATE_COMMAND(
    "report", "write one self-contained HTML page (plots, tables, configs) for a sweep or any runs",
    cmd_report);
