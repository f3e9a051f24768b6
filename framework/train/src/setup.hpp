// Turning an experiment into what a run needs (tokenizer, data, objective, model, optimizer,
// scheduler, evaluators, the train options), built and so validated before any training
// starts: a run, a dry run, sweep validation and loading a run build it here. Internal to
// the train layer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ablate/data.hpp"
#include "ablate/evaluator.hpp"
#include "ablate/generate.hpp"
#include "ablate/objective.hpp"
#include "ablate/scheduler.hpp"
#include "ablate/trainer.hpp"

namespace ablate {

// train.steps when the config gives none.
constexpr int64_t kDefaultSteps = 1000;

// The `train` section.
struct TrainConfig {
  int64_t steps, schedule_steps, batch, accum, threads, eval_every, eval_batches, checkpoint_every,
      log_every;
  float grad_clip;
  bool eval_at_start, eval_full;
  Precision precision;
  std::vector<int64_t> keep_checkpoints;  // steps whose checkpoint is kept (branch points)
  bool keeps(int64_t step) const;
  // Tokens of one optimizer step: batch x grad_accum x context (run.h5's tokens_per_step).
  int64_t tokens_per_step(int64_t context) const { return batch * accum * context; }
};

// Everything the loop needs, built (and so validated) before any training starts.
struct Setup {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const TextData> data;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::pair<std::string, std::unique_ptr<Evaluator>>> evaluators;  // (table, evaluator)
  std::vector<int32_t>
      token_bytes;  // each id's bytes of raw text, for bits per byte (token_byte_counts)
  TrainConfig train;
  Sampling sampling;
  std::string sample_prompt;
  int64_t sample_tokens = 0;
  uint64_t seed = 0;
  std::string name, out_dir, init_from;
  std::unique_ptr<ParamStore> no_params =
      std::make_unique<ParamStore>();  // for plugins without parameters
};

// `tokenizer_state`: the state of the tokenizer of the run this one continues or starts
// from (its data is then encoded with it, not with a tokenizer fitted afresh).
Setup build_setup(const Experiment& exp, const RunOptions& ro,
                  const std::string* tokenizer_state = nullptr);

// Where the run goes (RunOptions::out_dir, else output.dir, else runs/<name>), as build_setup
// decides, read from the config before building (the checkpoint there decides how to build).
std::string out_dir_of(const Experiment& exp, const RunOptions& ro);

// The objective of an experiment, its BuildContext given the tokenizer's vocabulary (texts:
// token_texts of the tokenizer, as dims.vocab_size and vocab), for a run and for loading one.
std::unique_ptr<Objective> build_objective(const Options& root,
                                           const std::vector<std::string>& texts, BuildContext ctx);

// The model of a run: the tokenizer's vocabulary (texts) plus the objective's extra tokens.
std::unique_ptr<Model> build_model(const Options& model_opts, const std::vector<std::string>& texts,
                                   const Objective& objective, uint64_t seed);

// What every column a run of this setup logs means for comparisons (metric_spec.hpp; run.h5's
// metric_specs): the trainer's own, the objective's (as train_ and val_ columns) and each
// evaluator's.
MetricSpecs metric_specs_of(const Setup& s);

// The training loss of one batch, or of one slice of a step's (a data-parallel rank's part of
// a gradient-accumulation micro-batch): the run's objective's summed loss divided by
// `step_count`, the scored positions of the whole step (every micro-batch, every rank's slice;
// 0: this batch's own), plus weight * value of every auxiliary term the model added
// (Graph::add_aux) at the slice's share of the step's scored positions (step_share). The
// slices' losses and gradients so add up to those of the step's mean over all its scored
// positions, as one batch holding them all would give. Every training loss of the trainer
// (the step, the memory probe) goes through here. *objective_loss, if given, gets the
// objective's sum and count (the train table's `loss` is the step's sum over its count,
// comparable across variants). An Error if the objective counts other positions than the
// targets score (>= 0). The unscored positions before each row's first scored one are its
// prompt (a prefix LM's attention reads it whole). `prefix` is scratch the caller keeps (no
// allocation per step). The objective's sum and the auxiliary terms are read once the tape is
// made, so that every step's plan of values' lifetimes (graph.hpp) keeps them for the caller.
Var batch_loss(Graph& g, Model& m, const Objective& obj, Batch a, const int32_t* targets,
               std::vector<int32_t>& prefix, int64_t step_count = 0,
               LossSum* objective_loss = nullptr);
// An Error unless the objective's loss counts the `scored` positions (targets >= 0) of the n
// of `batch` ("a batch", "an evaluation batch").
void check_loss_count(const LossSum& loss, int64_t scored, int64_t n, const char* batch);
// A slice's share of its step's scored positions: count / step_count (0 if none is scored).
float step_share(int64_t count, int64_t step_count);

// The scalar at key in a map node as text, else "" (no exceptions on missing keys).
std::string scalar_at(const YAML::Node& n, const char* key);
// The map at key in a map node, else a null node.
YAML::Node map_at(const YAML::Node& n, const char* key);
// train.schedule_steps of a config (else train.steps, else the default).
int64_t planned_steps(const YAML::Node& cfg);

}  // namespace ablate
