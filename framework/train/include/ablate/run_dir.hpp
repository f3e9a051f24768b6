// A run directory and what ablate knows about it: its paths and the one list of files a run
// writes there, the run's status (RunStatus, as run.h5 records it), the lock that keeps two
// processes from writing one run, what the directory holds, marking a failure, and how a
// run starts there (StartPlan: fresh, resume, extend, overwrite, keep aside). The trainer,
// `ablate run` and the sweeps ask it; none keeps its own list or rule. Layout: docs/RESULTS.md,
// docs/RELIABILITY.md.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ablate/runfile.hpp"

namespace ablate {

class RunLock;

// Tokens of one optimizer step of a run (batch_size x grad_accum x context): its run file's
// tokens_per_step, or for a run file written before that was recorded, from its resolved
// config; NaN when neither tells.
double run_tokens_per_step(const RunData& d);

// The checkpoint file of a run directory.
std::string checkpoint_path(const std::string& run_dir);
std::string run_file_path(const std::string& run_dir);
// A kept checkpoint (train.keep_checkpoints): checkpoints/step-<step>.ckpt in the run directory.
std::string kept_checkpoint_path(const std::string& run_dir, int64_t step);

// A run's status: run.h5's `status` attribute, written as status_name() gives it. missing:
// no run file; unreadable: a run file that cannot be read (neither is written).
enum class RunStatus { missing, running, done, failed, interrupted, branched, unreadable };
// "missing", "running", "done", "failed", "interrupted", "branched", "unreadable".
const char* status_name(RunStatus status);
// The status a run file records; no status (a run killed before it wrote one) is running,
// and a name this build does not know is unreadable.
RunStatus parse_status(const std::string& name);
// Writes `status` as the run file's status attribute.
void set_status(RunFile& rf, RunStatus status);

// What a run directory holds.
struct RunState {
  RunStatus status = RunStatus::missing;
  std::string error;   // failed: the run's error; unreadable: why
  std::string config;  // the run's config attribute ("" if none)
  bool checkpoint = false;
  int64_t last_step = -1;    // the last step of the train table (-1: none)
  int64_t total_steps = -1;  // the steps its latest segment trains to (-1: not recorded)
  double seconds_left = -1;  // training time to total_steps at the last logged rate, evaluations
                             // not counted (-1: unknown)
  double cpu_seconds = -1;   // the run file's cpu_seconds (-1: not recorded)
  double eval_cpu_seconds =
      -1;  // the part of it spent evaluating (-1: not recorded, runs before it was)
};

// What `ablate run` (or run_experiment's RunOptions) asks for a run directory that may hold
// a run already.
struct StartFlags {
  bool resume = false;     // continue from its checkpoint
  bool overwrite = false;  // delete the run there and start afresh
  int64_t extend_to = 0;   // with resume: continue to this step, past the planned end
  // Error for a combination that means nothing (--resume with --overwrite, --extend-to
  // without --resume); `ablate run` and run_experiment give the same message.
  void check() const;
};

// How a run starts in its directory.
enum class StartMode {
  fresh,       // nothing there: a new run
  resume,      // continue from checkpoint.ckpt, appending to run.h5
  extend,      // resume past the planned end (--extend-to)
  overwrite,   // the files of the run there are deleted first (RunDir::remove_run)
  keep_aside,  // a sweep's unfinished run that cannot resume: its files move aside, then afresh
  skip,        // a sweep's finished run with the same config: nothing to do
};

struct StartPlan {
  StartMode mode = StartMode::fresh;
  // resume and extend: the checkpoint's step and the run file as found (for the trainer)
  int64_t checkpoint_step = -1;
  std::optional<RunData> previous;
  // keep_aside: the suffix the earlier run's files get, ".stopped-at-<step>" ("-2"... if taken)
  std::string aside_suffix;
  // A sweep's point whose run file is unreadable and that would otherwise resume: run.h5
  // is kept as run.h5.unreadable before the run starts afresh.
  bool unreadable_aside = false;
  bool resumes() const { return mode == StartMode::resume || mode == StartMode::extend; }
};

class RunDir {
 public:
  explicit RunDir(std::string dir);
  ~RunDir();
  RunDir(RunDir&&) noexcept;
  RunDir& operator=(RunDir&&) noexcept;

  const std::string& path() const { return dir_; }
  std::string checkpoint() const { return checkpoint_path(dir_); }
  std::string run_file() const { return run_file_path(dir_); }
  std::string kept_checkpoint(int64_t step) const { return kept_checkpoint_path(dir_, step); }
  std::string log() const;              // run.log
  std::string config() const;           // config.yaml: the config as given
  std::string resolved_config() const;  // config.resolved.yaml: every option with its value
  std::string sample() const;           // sample.txt
  std::string failure_marker() const;   // failed.txt: a failure that run.h5 could not record

  bool exists() const;
  // A run is there: run.h5 or checkpoint.ckpt.
  bool holds_run() const;
  // The steps of the kept checkpoints, ascending.
  std::vector<int64_t> kept_steps() const;

  // What the directory holds (status, steps, time left, CPU time).
  RunState state() const;
  // For messages: "status done, checkpoint at step 60" ("" when it holds nothing).
  std::string describe() const;

  // The exclusive lock on run.lock, held until this object goes (RunLock); `create` makes
  // the directory first.
  void lock(bool create = false);
  bool locked() const { return lock_ != nullptr; }
  // Whether the process that last took the lock is alive (run_lock_owner_alive): a run whose
  // file says running is still being written. Looks only.
  bool lock_owner_alive() const;

  // How `ablate run` starts here with `flags` (flags.check() first): fresh, overwrite,
  // resume or extend, else an Error saying why not and what to do (a run is never written
  // over silently). Reads the checkpoint and run file; changes nothing.
  StartPlan plan(const StartFlags& flags) const;
  // How a sweep's point starts here given its state and its config's changes against the
  // one recorded: skip (finished, same config), resume, keep_aside or overwrite; an Error
  // for a finished run of another config. Changes nothing (also for previews).
  StartPlan plan_point(const RunState& st, const std::vector<std::string>& changes) const;
  // Carries out a point's plan before its run: keeps an unreadable run file aside (a
  // resume whose run file cannot be read becomes an overwrite) and moves keep_aside's
  // files aside. Returns the names the files were kept as.
  std::vector<std::string> prepare_point(StartPlan& plan) const;
  // Deletes the files a run writes here (and the kept checkpoints), nothing else.
  void remove_run() const;

  // Records a failure in the run file being written: status failed, the error, the time.
  static void mark_failed(RunFile& rf, const std::string& error);
  // Records the failure of a run that ended without marking it (killed, crashed, failed
  // before its run file existed), creating run.h5 (with name and config) if needed;
  // failed.txt when even that cannot be written.
  void mark_failed(const std::string& name, const std::string& config,
                   const std::string& error) const;
  // Removes failed.txt (a run starting again).
  void clear_failure() const;

 private:
  std::string dir_;
  std::unique_ptr<RunLock> lock_;
};

// RunDir(run_dir).state().
RunState run_state(const std::string& run_dir);

}  // namespace ablate
