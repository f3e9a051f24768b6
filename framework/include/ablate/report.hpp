// One self-contained HTML page for a sweep: the comparison table(s), loss curves per
// group (mean line, min-max band over seeds; train and validation), a heat map for
// two-dimensional sweeps, parameter counts, every run's status and config
// (collapsible), and final samples. Inline SVG and CSS only: no script, no network.
#pragma once
#include <string>

#include "ablate/compare.hpp"

namespace ablate {

struct ReportOptions {
  CompareOptions compare;  // the main comparison (default: val_loss, final, by variant)
  std::string title;       // "" = "Sweep <name>"
};

std::string render_report(const SweepResults& r, const ReportOptions& o = {});

// The pages' shared stylesheet (also used by ablate inspect).
const char* report_css();

}  // namespace ablate
