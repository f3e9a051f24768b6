// Training a model from an experiment: validation of the whole config before any work,
// the training loop (gradient accumulation, clipping, schedule), periodic evaluation,
// metrics in the run's HDF5 file, atomic checkpoints, bitwise resume, a final sample.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ablate/experiment.hpp"
#include "ablate/model.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/run_dir.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate {

class Communicator;

struct RunOptions {
  std::string out_dir;  // overrides output.dir
  // A run directory that holds a run (run.h5 or checkpoint.ckpt) is never written over
  // silently: starting there is an error unless one of these says what to do.
  bool resume = false;     // continue from out_dir/checkpoint.ckpt (an error when there is none)
  bool overwrite = false;  // delete the run in out_dir (the files ablate writes) and start afresh
  int64_t extend_to = 0;   // with resume: continue to this step, past the planned end (the lr
                           // schedule holds its last value: train.schedule_steps)
  bool allow_config_change = false;
  bool quiet = false;  // no progress line (run.log is written all the same)
  // SIGINT/SIGTERM/SIGHUP: finish the step, write a checkpoint, set status `interrupted`; a second
  // signal exits at once. For the CLI (the library leaves handlers alone by default).
  bool handle_signals = false;
  bool memory_check = true;  // refuse to start when the memory estimate exceeds what is free
  std::string name;          // run name when the config has none (default: the file's stem)
  int64_t threads =
      0;  // 0: train.threads from the config, else the cores not claimed by other runs
  // Data-parallel ranks (communicator.hpp); null: world(), i.e. MPI_COMM_WORLD under an MPI
  // launcher, else this process alone. Rank 0 alone writes the run file and checkpoints.
  Communicator* comm = nullptr;
};

struct RunSummary {
  std::string run_dir;
  int64_t steps = 0;                    // the last step trained
  double train_loss = 0, val_loss = 0;  // last evaluation
  double tokens_per_s = 0;              // mean over the run
  int64_t n_params = 0;
  std::string sample;
  int interrupted_by = 0;  // the signal that stopped the run (status interrupted), else 0
};

RunSummary run_experiment(const Experiment& exp, const RunOptions& ro = {});

// Builds everything a run needs (data, tokenizer, model, optimizer, evaluators) without
// training: every config error surfaces here. For dry runs and sweep validation.
struct MemoryEstimate {
  // Bytes: parameters, their gradients, optimizer state, activations, and the rest of the
  // process (data, code, libraries: its resident size). Activations are the larger of a step's
  // at train.batch_size (measured: a forward and backward pass at batch 1 and 2, extrapolated
  // linearly; at batch 1 alone for a batch of 1) and `planning`'s.
  double params = 0, grads = 0, optimizer = 0, activations = 0, activations_per_sequence = 0,
         other = 0;
  // The forward pass of one sequence that plans the values' lifetimes (graph.hpp): it keeps
  // every value, which at a micro-batch of one or a few is more than a step holds.
  double planning = 0;
  // train.precision bf16: the bf16 copies of the weights that the matrix products read.
  double param_copies = 0;
  double total() const { return params + grads + optimizer + activations + other + param_copies; }
};
struct ExperimentInfo {
  std::string name, out_dir;
  int64_t n_params = 0, vocab_size = 0, steps = 0, tokens_per_step = 0, batch_size = 0,
          grad_accum = 0, context = 0;
  double flops_per_token = 0;  // training (forward + backward)
  MemoryEstimate memory;       // filled when asked for
};
ExperimentInfo describe_experiment(const Experiment& exp, const RunOptions& ro = {},
                                   bool estimate_memory = false);
// Empty when the estimate fits in the memory this process can still use (machine.hpp:
// memory_room), else the error: the figures and the options that lower them.
std::string memory_shortfall(const MemoryEstimate& m, int64_t batch_size, int64_t grad_accum);

// A trained run loaded back from its directory (checkpoint.ckpt): config, tokenizer,
// model with its weights.
struct LoadedRun {
  std::string dir;
  std::unique_ptr<Experiment> experiment;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Model> model;
  int64_t step = 0;
  std::string objective;  // its objective's type
  bool generates = true;  // whether the objective predicts the next token (Objective::generates)
};
LoadedRun load_run(const std::string& run_dir);
// The run's train.precision (float32 when its config does not set it).
Precision run_precision(const LoadedRun& run);
// Throws unless the run's model continues text token by token (generation, the task
// evaluators' decoding): a masked-LM encoder does not. `use` names what was asked.
void require_generating(const LoadedRun& run, const std::string& use);

// `ablate run RUN --branch NEW_DIR --at STEP`: a new run directory that continues the run in
// source_dir from its checkpoint at `step` (a kept one or its latest; 0: the latest), with
// the source's run file up to that step and its CPU time until then. The branch then
// trains with resume, under its own config: run_experiment(exp, {.out_dir = new_dir,
// .resume = true, .allow_config_change = true}); `segments` records where it branched.
struct Branch {
  std::string checkpoint;  // the checkpoint branched from
  std::string config;      // its config (YAML)
  int64_t step = 0;        // its step
};
// The checkpoint prepare_branch would start from, without writing anything (--dry-run); an
// Error listing the kept steps and the latest when there is none at `step`.
Branch find_branch(const std::string& source_dir, int64_t step);
Branch prepare_branch(const std::string& source_dir, int64_t step, const std::string& new_dir);

}  // namespace ablate
