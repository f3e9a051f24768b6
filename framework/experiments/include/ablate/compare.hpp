// Comparing the runs of a sweep, or any runs: one number per run (a metric's final value,
// its best, or its value at a step), grouped by variant or a swept key, summarised over seeds
// (mean, std, t confidence interval) and compared with a baseline group by a paired
// t-test over runs that share everything but the grouping key (same seed, same other
// values). Runs that are missing, failed or unfinished are listed, never dropped silently.
#pragma once
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ablate/runfile.hpp"
#include "ablate/stats.hpp"
#include "ablate/sweep.hpp"

namespace ablate {

struct SweepRun {
  const SweepPoint* point = nullptr;  // into SweepResults::sweep.points
  RunState state;
  RunData data;  // empty unless the run file was readable
  bool readable = false;
};

struct SweepResults {
  Sweep sweep;                 // from the manifest (load_run_results: one point per run given)
  std::vector<SweepRun> runs;  // one per point, in point order
  bool any_runs = false;       // from load_run_results, not a sweep's manifest
  SweepResults() = default;
  SweepResults(const SweepResults&) = delete;  // runs point into sweep
  SweepResults(SweepResults&&) = default;
};
// Reads <sweep_dir>/manifest.yaml and every point's run file.
SweepResults load_sweep_results(const std::string& sweep_dir);
// Any runs, as a sweep without variants: `paths` are run directories, run.h5 files,
// sweep directories (all their runs) or glob patterns ("runs/lr*"). Each run is a point
// whose id is the shortest unique tail of its path and whose values are the options of
// its resolved config that differ between the runs (seed, name and output.* aside), so
// that --by takes any such key and runs pair by seed as in a sweep. Errors name a path
// that is no run, a pattern that matches nothing, and fewer than one run.
SweepResults load_run_results(const std::vector<std::string>& paths);
// How many runs are in each state (done, running, missing, ...), by state name.
std::map<std::string, size_t> runs_by_state(const SweepResults& r);

struct CompareOptions {
  std::string metric = "val_loss";
  std::string table;          // "" = the table holding the metric (eval first)
  std::string at = "final";   // final | best | step=N
  std::string by;             // "" = variant if any, else the one swept key, else point
                              // (any runs: the one differing key, else point, else run);
                              // run = every run its own group
  std::string baseline;       // "" = the sweep's baseline variant, else the first group
  int higher_is_better = -1;  // -1 = as the runs declare it (run.h5's metric_specs), else from
                              // the metric name (accuracy, exact_match, em_*, ... are higher)
  double level = 0.95;
};

struct GroupResult {
  std::string label;
  std::vector<const SweepRun*> runs;    // every point of the group
  std::vector<const SweepRun*> valued;  // the runs that gave a value
  std::vector<double> values;           // their values
  stats::Summary summary;
  bool is_baseline = false;
  bool has_test = false;   // paired with the baseline (not the baseline itself)
  stats::PairedTest test;  // this group - baseline, over pairs
  int64_t wins = 0;        // pairs where this group is better
  double params_min = std::numeric_limits<double>::quiet_NaN(), params_max = params_min;
  std::vector<std::string> problems;  // "relu-seed2: failed: ..."
};

struct Comparison {
  std::string metric, table, at, by, baseline;
  bool higher_is_better = false;
  bool direction_known = true;   // false: neither an option, the runs' declaration
                                 // (metric_specs) nor the name told (no wins, no best, no colours)
  std::string direction_source;  // "as given", "declared by the runs", "from the metric name"
  bool intervals_cut =
      false;  // a proportion whose t intervals were cut to [0, 1] (means) and [-1, 1] (differences)
  bool differences_cut = false;  // ... and a difference's interval among them
  double level = 0.95;
  std::vector<GroupResult> groups;
  std::vector<std::string>
      pooled;  // swept keys ("variant" included) that vary inside a group, seed aside
  std::vector<std::string> notes;  // how to read it: the test, pairing, direction, what is pooled
  std::string machines;  // "" when every valued run had the same CPU and kernel path, else
                         // a note naming each (cpu, kernel path) and its runs (also in notes)
};

// Errors (unknown metric, table, --by key or baseline) name what is available.
Comparison compare_sweep(const SweepResults& r, const CompareOptions& o);
// "higher is better", "lower is better" or "direction not known" (for titles).
std::string direction_text(const Comparison& c);
// format: table (aligned text), markdown or csv.
std::string format_comparison(const Comparison& c, const std::string& format);
// Several metrics of the same runs and groups (compare_sweep with only the metric changed):
// one table, a column per metric (the baseline's mean ± std, the others' paired differences
// with CIs); csv: each metric's rows under one header. One comparison: format_comparison.
std::string format_comparisons(const std::vector<Comparison>& cs, const std::string& format);
// From a metric's name: 1 = higher is better (acc, exact, match, em, f1, score, ...), 0 =
// lower is better (loss, ppl, error, bpc, bpb, ...), -1 = the name does not tell.
int metric_higher_is_better(const std::string& metric);
// A metric's columns over steps for one run: (steps, values) of `table`; empty if absent.
std::pair<std::vector<double>, std::vector<double>> metric_series(const RunData& d,
                                                                  const std::string& table,
                                                                  const std::string& metric);

// A run's per-step metrics as CSV (header line, then one line per row; numbers in their
// shortest round-trip form; empty cells where a table has no row). table "": every table
// with a step column joined on step, columns "step", then "<table>/<column>" (train first, then
// eval, then the others by name), one line per step (a step a table logs twice gets two lines);
// else that table alone, its own columns, rows in file order. Errors name the tables there are.
std::string metrics_csv(const RunData& d, const std::string& table, const std::string& what);

}  // namespace ablate
