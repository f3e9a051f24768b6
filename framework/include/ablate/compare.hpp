// Comparing the runs of a sweep: one number per run (a metric's final value, its best,
// or its value at a step), grouped by variant or a swept key, summarised over seeds
// (mean, std, t confidence interval) and compared with a baseline group by a paired
// t-test over runs that share everything but the grouping key (same seed, same other
// values). Runs that are missing, failed or unfinished are listed, never dropped silently.
#pragma once
#include <limits>
#include <string>
#include <vector>

#include "ablate/runfile.hpp"
#include "ablate/stats.hpp"
#include "ablate/sweep.hpp"

namespace ablate {

struct SweepRun {
  const SweepPoint* point = nullptr;  // into SweepResults::sweep.points
  RunState state;
  RunData data;          // empty unless the run file was readable
  bool readable = false;
};

struct SweepResults {
  Sweep sweep;                 // from the manifest
  std::vector<SweepRun> runs;  // one per point, in point order
  SweepResults() = default;
  SweepResults(const SweepResults&) = delete;  // runs point into sweep
  SweepResults(SweepResults&&) = default;
};
// Reads <sweep_dir>/manifest.yaml and every point's run file.
SweepResults load_sweep_results(const std::string& sweep_dir);

struct CompareOptions {
  std::string metric = "val_loss";
  std::string table;          // "" = the table holding the metric (eval first)
  std::string at = "final";   // final | best | step=N
  std::string by;             // "" = variant if any, else the one swept key, else point
  std::string baseline;       // "" = the sweep's baseline variant, else the first group
  int higher_is_better = -1;  // -1 = from the metric name (accuracy, exact_match, ... are higher)
  double level = 0.95;
};

struct GroupResult {
  std::string label;
  std::vector<const SweepRun*> runs;     // every point of the group
  std::vector<const SweepRun*> valued;   // the runs that gave a value
  std::vector<double> values;            // their values
  stats::Summary summary;
  bool is_baseline = false;
  bool has_test = false;                 // paired with the baseline (not the baseline itself)
  stats::PairedTest test;                // this group - baseline, over pairs
  int64_t wins = 0;                      // pairs where this group is better
  double params_min = std::numeric_limits<double>::quiet_NaN(), params_max = params_min;
  std::vector<std::string> problems;     // "relu-seed2: failed: ..."
};

struct Comparison {
  std::string metric, table, at, by, baseline;
  bool higher_is_better = false;
  double level = 0.95;
  std::vector<GroupResult> groups;
  std::vector<std::string> notes;  // how to read it: the test, pairing, direction
};

// Errors (unknown metric, table, --by key or baseline) name what is available.
Comparison compare_sweep(const SweepResults& r, const CompareOptions& o);
// format: table (aligned text), markdown or csv.
std::string format_comparison(const Comparison& c, const std::string& format);
bool metric_higher_is_better(const std::string& metric);
// A metric's columns over steps for one run: (steps, values) of `table`; empty if absent.
std::pair<std::vector<double>, std::vector<double>> metric_series(const RunData& d, const std::string& table,
                                                                  const std::string& metric);

}  // namespace ablate
