// Sweeps: one YAML file -> an explicit list of points (variant x grid x zip x seed), each
// an experiment (a base plus overrides) with its own run directory. The mapping
//   point index -> (variant, grid values, zip values, seed) -> overrides -> id -> run dir
// is a pure function of the sweep file, so that point i can run anywhere as
// `ablate sweep FILE --point i` (a local job, a Slurm array task). Format: docs/SWEEPS.md.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ablate/experiment.hpp"
#include "ablate/run_dir.hpp"
#include "ablate/trainer.hpp"

namespace ablate {

// One key.path=value the sweep sets, with where the sweep file writes it.
struct SweepOverride {
  std::string key, value;  // "model.ffn", "{type: swiglu, match_params: true}"
  std::string where;       // "sweep.yaml:12:7" (empty when read back from a manifest)
  std::string text() const { return key + "=" + value; }
};

struct SweepPoint {
  int64_t index = 0;
  std::string id;       // "swiglu-seed0", "relu-d_model=64-seed1": unique, filesystem-safe
  std::string variant;  // "" when the sweep has no variants
  std::vector<std::pair<std::string, std::string>>
      values;  // grid then zip key -> value, spec order
  int64_t seed_index = 0;
  int64_t seed = 0;
  std::vector<SweepOverride> overrides;  // applied in order: overrides:, variant, grid, zip, seed
  std::string run_dir;                   // <sweep dir>/runs/<id>
  std::vector<std::string> override_texts() const;
  // The value this point gives key (last override of exactly that key), "" if none.
  std::string value_of(const std::string& key) const;
};

struct Sweep {
  std::string file;  // the sweep file as given (from a manifest: as recorded there)
  std::string name;
  std::string dir;   // where results live: manifest.yaml, runs/<id>/, logs/, sweep.log
  std::string base;  // the base experiment file, or "(inline)"
  std::vector<std::string> variants;  // in file order
  std::string baseline;               // a variant, "" without variants
  std::vector<std::string> grid_keys, zip_keys;
  std::vector<int64_t> seeds;
  std::vector<SweepPoint> points;

  // The experiment of a point (base + overrides). Errors in it name the base file for
  // base values and the sweep file (via located_error) for values the sweep sets.
  Experiment experiment(const SweepPoint& p) const;
  // Swept key paths besides the seed (grid, zip, and every key a variant sets).
  std::vector<std::string> swept_keys() const;

  // Set by load_sweep/parse_sweep: the base as YAML text with its file name and directory.
  std::string base_text, base_label, base_dir;
};

// Reads a sweep file; dir_override (the CLI's --dir) replaces `dir:`. Every spec error
// is a ConfigError "file:line:col: key: what; allowed ...; did you mean ...".
Sweep load_sweep(const std::string& path, const std::string& dir_override = "");
Sweep parse_sweep(const std::string& text, const std::string& file, const std::string& file_dir,
                  const std::string& dir_override = "");

// "point 3 (swiglu-seed1): <message>", with "command-line override 'k=v'" locations in
// the message replaced by where the sweep file sets k.
std::string located_error(const SweepPoint& p, const std::string& message);

// The points a list names (`ablate sweep --points`), in point order without repeats: items
// separated by commas, each an index ("3"), a range ("0-2") or a glob over point ids
// ("recipe-*", "*-seed0"). An item that names no point is an error naming the item, the
// range of indices and some ids (with a suggestion for a near miss).
std::vector<int64_t> select_points(const Sweep& s, const std::string& list);

// The manifest (<dir>/manifest.yaml): every point with its id, variant, values, seed,
// overrides and run directory. Identical for identical sweep files, written atomically,
// so that concurrent array tasks may all write it.
std::string manifest_text(const Sweep& s);
void write_manifest(const Sweep& s);
// Reads <sweep_dir>/manifest.yaml; points' run_dir are resolved against sweep_dir.
Sweep read_manifest(const std::string& sweep_dir);

// Config keys that differ between a run's recorded config and an experiment (as built,
// defaults filled in): "model.d_model: 64 -> 96", "train.foo (added)"; bookkeeping
// options (train.keep_checkpoints, ...) are not changes here: such a run resumes or stays done.
std::vector<std::string> config_changes(const std::string& recorded_yaml, const Experiment& exp);

// Validation before anything runs: builds every point's experiment (data, tokenizer,
// model, plugins) and looks at its run directory. Throws one ConfigError naming every
// invalid point (identical messages grouped), or an Error naming finished runs whose
// config differs from the sweep's. on_point(k, n), if given, is called after each of the n
// points is checked (for a progress line: a point that reads new data takes seconds).
struct PointCheck {
  ExperimentInfo info;
  std::string config;  // the point's config as built (what its run file will record)
  RunState state;
  std::vector<std::string> changes;  // vs the config recorded in the run directory
};
std::vector<PointCheck> validate_sweep(const Sweep& s,
                                       const std::function<void(size_t, size_t)>& on_point = {});

// Runs one point in this process (what `ablate sweep FILE --point I` does). A finished
// run with the same config is skipped (returns false); an unfinished one resumes from
// its checkpoint; one that cannot (another config's, or no checkpoint) starts afresh,
// its files kept aside (RunDir::plan_point).
bool run_point(const Sweep& s, const SweepPoint& p, RunOptions ro);

// Runs the points that are not done as child processes (`binary sweep FILE --point I
// --dir D --threads T --quiet`), at most `jobs` at once, with a progress display on
// stderr. A point whose child fails is recorded as failed in its run file (also when
// the child died before it could write one) and the others continue. Events go to
// <dir>/sweep.log, each child's output to <dir>/logs/<id>.log.
struct SweepRunOptions {
  int64_t jobs = 1;
  int64_t threads = 0;                  // per job; 0 = max(1, cores / jobs)
  std::string binary;                   // the ablate executable
  std::vector<std::string> extra_args;  // passed to every child (e.g. --plugin-dir D)
  double progress_every = 0;            // seconds; 0 = 2 on a terminal, 15 otherwise
  bool quiet = false;                   // events and summary only
  std::vector<int64_t> only;            // run only these points (select_points); empty: all
};
struct SweepRunResult {
  std::vector<int64_t> done, skipped, failed;  // point indices
  std::vector<int64_t> stopped;           // interrupted with a checkpoint: resume on the next run
  std::map<int64_t, std::string> errors;  // failed point -> error
  bool interrupted = false;               // SIGINT/SIGTERM/SIGHUP: children stopped
  double seconds = 0;
};
SweepRunResult run_sweep(const Sweep& s, const std::vector<PointCheck>& checks,
                         const SweepRunOptions& o);

// ---- Slurm (sweep_slurm.cpp; docs/CLUSTER.md) ----------------------------------------------
// A sweep as one Slurm array job: one array task per point that is not done, each running
// `ablate sweep FILE --point $SLURM_ARRAY_TASK_ID`. The generated batch script stays in the
// sweep directory (<dir>/slurm/submit-<n>.sbatch) and every submitted job is recorded in
// <dir>/slurm_jobs ("<job id> <indices> <time>" per line) for sweep_status.
struct SlurmOptions {
  std::string partition, time, mem;  // sbatch --partition/--time/--mem ("" = cluster default)
  int64_t cpus_per_task =
      0;  // sbatch --cpus-per-task and ablate --threads (0: Slurm's default, 1 thread)
  int64_t max_running = 0;               // --array=...%N: at most N tasks at once (0: no limit)
  std::string binary;                    // the ablate executable the tasks run
  std::vector<std::string> extra_args;   // passed to every task (e.g. --plugin-dir D)
  std::vector<std::string> sbatch_args;  // more sbatch options, verbatim
  std::vector<int64_t> only;             // submit only these points (select_points); empty: all
};
struct SlurmSubmission {
  std::string job_id;              // "" when nothing needed submitting
  std::string script;              // the batch script's path
  std::vector<int64_t> submitted;  // point indices in the array
  std::vector<int64_t> done;       // skipped: done
  std::vector<int64_t> queued;     // skipped: pending or running in an earlier job
};
SlurmSubmission submit_slurm(const Sweep& s, const std::vector<PointCheck>& checks,
                             const SlurmOptions& o);

// "0-3,5,7-8" for sbatch --array, and back ("1-7:2" steps and "%N" limits understood).
std::string array_spec(const std::vector<int64_t>& indices);
std::vector<int64_t> parse_array_spec(const std::string& spec);

// The state of every point: from its run file, and for points submitted to Slurm from
// Slurm's own view (squeue for queued/running tasks, scontrol for finished ones; no
// accounting needed).
struct PointStatus {
  std::string state;   // pending, running, done, failed, interrupted, stopped, not started
  std::string detail;  // "step 40/60", "Slurm: FAILED exit 1", the run's error, ...
  std::string slurm;   // "12_3" when a Slurm task is known for the point
};
std::vector<PointStatus> sweep_status(const Sweep& s);

// Runs argv (looked up on PATH) and returns its exit status and stdout+stderr; status
// 127 when the program cannot be started.
struct ProcessResult {
  int status = -1;
  std::string output;
};
ProcessResult run_process(const std::vector<std::string>& argv);

}  // namespace ablate
