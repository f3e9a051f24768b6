// One self-contained HTML page for a sweep: the comparison table(s), curves per point
// (mean line over seeds, min-max band over those seeds, optionally each run's line) of
// validation and training loss, learning rate, gradient norm and evaluator metrics, against
// steps, tokens or training seconds, a heat map for
// two-dimensional sweeps, parameter counts, every run's status and config
// (collapsible), and final samples. Inline SVG and CSS only: no script, no network.
#pragma once
#include <string>
#include <vector>

#include "ablate/compare.hpp"
#include "ablate/svg.hpp"

namespace ablate {

struct ReportOptions {
  CompareOptions compare;  // the main comparison (default: val_loss, final, by variant)
  std::string title;       // "" = "Sweep <name>"
  std::string x = "step";  // curves' x axis: step | tokens | seconds
  bool log_x = false, log_y = false;
  bool seed_lines = false;  // each run's own line (faint) besides the mean over seeds
  int plot_width = 640;     // pixels; height 0.62 x width
  std::vector<std::string>
      columns;  // evaluator metrics with a table and a plot (fnmatch patterns, "em_*"); empty = all
};

// Errors: an unknown x axis, a plot width outside 240-4000, a --columns pattern that matches
// nothing, and compare_sweep's.
std::string render_report(const SweepResults& r, const ReportOptions& o = {});

// Each group's paired difference from the baseline of `main` in its metric, at every step the
// baseline's runs logged it (compare_sweep at step=N, so paired and tested as the table): one
// series per group with a test, in group order, x the steps, y the mean difference, lo and hi
// its confidence interval (equal to y with one pair). Empty without a baseline or with fewer
// than two steps. The report draws it as "Difference from <baseline> over training".
std::vector<svg::Series> difference_series(const SweepResults& r, const Comparison& main,
                                           const ReportOptions& opt);

// A run's x value at each of `steps` for ReportOptions::x: the step itself; tokens (step x
// batch_size x grad_accum x context of its resolved config); or training seconds (step x
// tokens per step / tokens_per_s of its train rows, interpolated between rows, 0 at step 0).
// NaN where the run does not record what is needed.
std::vector<double> curve_x(const RunData& d, const std::vector<double>& steps,
                            const std::string& x);

// The pages' shared stylesheet (also used by ablate inspect).
const char* report_css();

}  // namespace ablate
