// ablate report SWEEP_DIR -o report.html: one self-contained HTML page (inline SVG plots,
// comparison tables, parameter counts, configs) for a sweep.
#include <fstream>
#include <iostream>

#include "ablate/report.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

static int cmd_report(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()
    ("sweep-dir", po::value<std::string>(), "sweep directory (holds manifest.yaml)")
    ("out,o", po::value<std::string>(), "HTML file to write (default: SWEEP_DIR/report.html)")
    ("metric,m", po::value<std::string>()->default_value("val_loss"), "metric of the main comparison table")
    ("table,t", po::value<std::string>(), "table holding the metric (default: found by name)")
    ("at", po::value<std::string>()->default_value("final"), "final | best | step=N")
    ("by", po::value<std::string>(), "group by: variant, point, or a swept key path")
    ("baseline,b", po::value<std::string>(), "group compared against")
    ("title", po::value<std::string>(), "page title (default: Sweep <name>)");
  po::positional_options_description pos;
  pos.add("sweep-dir", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate report SWEEP_DIR [-o report.html] [options]", opts, pos, vm)) return 0;
  if (!vm.count("sweep-dir")) throw ablate::cli::UsageError("missing the sweep directory (e.g. sweeps/swiglu_vs_relu)");
  const std::string dir = vm["sweep-dir"].as<std::string>();
  ablate::ReportOptions o;
  o.compare.metric = vm["metric"].as<std::string>();
  if (vm.count("table")) o.compare.table = vm["table"].as<std::string>();
  o.compare.at = vm["at"].as<std::string>();
  if (vm.count("by")) o.compare.by = vm["by"].as<std::string>();
  if (vm.count("baseline")) o.compare.baseline = vm["baseline"].as<std::string>();
  if (vm.count("title")) o.title = vm["title"].as<std::string>();
  const std::string out = vm.count("out") ? vm["out"].as<std::string>() : dir + "/report.html";
  ablate::SweepResults r = ablate::load_sweep_results(dir);
  const std::string html = ablate::render_report(r, o);
  std::ofstream f(out, std::ios::binary);
  f << html;
  f.close();
  if (!f) throw ablate::Error(out + ": cannot write the report");
  std::cout << "report: " << out << " (" << html.size() / 1024 + 1 << " KB, " << r.runs.size() << " runs)\n";
  return 0;
}

ABLATE_COMMAND("report", "write one self-contained HTML page (plots, tables, configs) for a sweep", cmd_report);
