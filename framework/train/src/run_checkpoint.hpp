// A run's checkpoint (checkpoint.ckpt, checkpoints/step-<S>.ckpt) and its keys: the config,
// the tokenizer state, param/<name>, optimizer/<buffer>, step, rng/data, seed, data_sha256,
// the partial train-metric window, and in a kept checkpoint the CPU time so far. Writing
// and reading them is done here alone. Internal to the train layer.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ablate/checkpoint.hpp"
#include "setup.hpp"

namespace ablate {

// The train-metric row averages the steps since the last row; a checkpoint between two
// rows carries that partial window so that a resumed run logs the same row.
struct LossWindow {
  double loss = 0;
  int64_t steps = 0;
  std::map<std::string, double> aux;  // auxiliary terms' sums (Graph::add_aux), by name
};

// Where the loop stands in a checkpoint: the step it was written after, the data stream's
// state, the partial loss window.
struct CheckpointPosition {
  int64_t step = 0;
  uint64_t data_rng = 0;
  LossWindow window;
};

// The checkpoint at `step`, written to the run's checkpoint.ckpt and, for a kept step, also to
// checkpoints/step-<step>.ckpt with the run's CPU seconds so far (a branch from it starts its
// count there; a branch from the latest checkpoint takes them from run.h5, written with it).
void save_run_checkpoint(const std::string& dir, const Experiment& exp, const Setup& s,
                         int64_t step, const CheckpointPosition& at, double cpu_seconds,
                         double eval_cpu_seconds, bool keep);

// A checkpoint written by `ablate run`, with the keys resuming needs.
Checkpoint read_run_checkpoint(const std::string& path);
// The config stored in a checkpoint, parsed.
YAML::Node checkpoint_config(const Checkpoint& ck, const std::string& path);
// The loop's position stored in a checkpoint (read_run_checkpoint checked its keys).
CheckpointPosition checkpoint_position(const Checkpoint& ck);
int64_t checkpoint_step(const Checkpoint& ck);

// Every parameter is checked (name, shape where the checkpoint records it, size) before any is
// written: a checkpoint that does not fit the model loads nothing.
void restore_params(Model& m, const Checkpoint& ck, const std::string& path);
void restore_optimizer(Optimizer& opt, const Checkpoint& ck, const std::string& path);

// init_from / --fork: the weights of another run (`init`, its path in texts["path"]), which
// must have this model's parameters; a mismatch names the options of `config` (the new run's)
// that differ from that run's model (what usually causes it).
void restore_init_params(Model& m, const Checkpoint& init, const YAML::Node& config);

// Resuming: the config changes against the checkpoint's (a new segment of the run), or an
// Error for a change that alters results (train.steps and schedule_steps with --extend-to,
// and train.precision, may change) or for changed training data, unless
// ro.allow_config_change.
std::vector<std::string> resume_changes(const Checkpoint& ck, const std::string& out_dir,
                                        const Experiment& exp, const TextData& data,
                                        const RunOptions& ro);

// The CPU seconds (all, evaluating) a kept checkpoint records; false when it has none.
bool kept_cpu_seconds(const Checkpoint& ck, double& cpu, double& eval_cpu);
// Removes them (a run's checkpoint.ckpt holds the state alone).
void drop_kept_cpu_seconds(Checkpoint& ck);

// The run directory or checkpoint file `ref` names (relative to the working directory,
// else to the experiment's), as the checkpoint file to read (init_from, --fork).
std::string init_checkpoint(const std::string& ref, const std::string& exp_dir);

}  // namespace ablate
