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
#include "ablate/tokenizer.hpp"

namespace ablate {

class Communicator;

struct RunOptions {
  std::string out_dir;            // overrides output.dir
  bool resume = false;            // continue from out_dir/checkpoint.ckpt if present
  bool allow_config_change = false;
  bool quiet = false;             // no progress line
  int64_t threads = 0;            // 0: train.threads from the config, else this machine's cores / its ranks
  // Data-parallel ranks (communicator.hpp); null: world(), i.e. MPI_COMM_WORLD under an MPI
  // launcher, else this process alone. Rank 0 alone writes the run file and checkpoints.
  Communicator* comm = nullptr;
};

struct RunSummary {
  std::string run_dir;
  int64_t steps = 0;
  double train_loss = 0, val_loss = 0;  // last evaluation
  double tokens_per_s = 0;               // mean over the run
  int64_t n_params = 0;
  std::string sample;
};

RunSummary run_experiment(const Experiment& exp, const RunOptions& ro = {});

// Builds everything a run needs (data, tokenizer, model, optimizer, evaluators) without
// training: every config error surfaces here. For dry runs and sweep validation.
struct ExperimentInfo {
  std::string name, out_dir;
  int64_t n_params = 0, vocab_size = 0, steps = 0, tokens_per_step = 0;
  double flops_per_token = 0;
};
ExperimentInfo describe_experiment(const Experiment& exp, const RunOptions& ro = {});

// A trained run loaded back from its directory (checkpoint.ckpt): config, tokenizer,
// model with its weights.
struct LoadedRun {
  std::string dir;
  std::unique_ptr<Experiment> experiment;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Model> model;
  int64_t step = 0;
};
LoadedRun load_run(const std::string& run_dir);

// The checkpoint file of a run directory.
std::string checkpoint_path(const std::string& run_dir);
std::string run_file_path(const std::string& run_dir);

}  // namespace ablate
