// What a metric column means when runs are compared: which way is better and the range its
// values lie in. Evaluators and objectives declare their columns (metric_specs()); the trainer
// records every table's columns in run.h5 (root attribute metric_specs, YAML), and `ablate
// compare` and `ablate report` take a metric's direction and bounds from there, falling back to
// its name only for a column nobody declared (an older run, a plugin that declares nothing).
#pragma once
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace ablate {

enum class Better { lower = -1, neither = 0, higher = 1 };
const char* better_name(Better b);  // "lower", "neither", "higher"

struct MetricSpec {
  std::string column;  // a column's name, or a pattern whose '*' matches any text ("em_*")
  Better better = Better::neither;
  double lo = -std::numeric_limits<double>::infinity();  // every value lies in [lo, hi]
  double hi = std::numeric_limits<double>::infinity();
};

// The first spec of `specs` whose column or pattern matches `column`; null if none does.
const MetricSpec* find_metric_spec(const std::vector<MetricSpec>& specs, const std::string& column);

// Specs by table ("train", "eval", "eval/arithmetic") as the YAML text of run.h5's attribute
// metric_specs: {table: [{column: val_loss, better: lower, lo: 0}, ...]}, and back
// (an Error naming the table and entry that is malformed).
using MetricSpecs = std::map<std::string, std::vector<MetricSpec>>;
std::string metric_specs_yaml(const MetricSpecs& by_table);
MetricSpecs parse_metric_specs(const std::string& yaml);

}  // namespace ablate
