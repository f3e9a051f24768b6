// The curves section of the HTML report (report_curves.cpp), for render_report
// (report.cpp). Internal to the experiments layer.
#pragma once
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ablate/report.hpp"

namespace ablate::report {

// Evaluator table -> the columns the page shows, in table_columns' order.
using EvaluatorColumns = std::map<std::string, std::vector<std::string>>;

// The "Curves" section: the difference from the baseline over training, then the losses,
// learning rate, gradient norm, auxiliary terms and evaluator metrics.
void curves_html(std::ostringstream& o, const SweepResults& r, const Comparison& main,
                 const ReportOptions& opt, const EvaluatorColumns& extra_tables);

}  // namespace ablate::report
