// Family "objective": what the model is trained to predict and how it is scored. The
// trainer draws windows of text, the objective turns them into the model's inputs and
// targets, computes the loss and any metrics of an evaluation besides it. An objective
// says which attention it needs: a causal one (next_token) must not see the token it
// predicts; a bidirectional one (masked_lm) needs the context on both sides.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/graph.hpp"
#include "ablate/metric_spec.hpp"
#include "ablate/ops.hpp"
#include "ablate/tensor.hpp"

namespace ablate {

// Its constructor's BuildContext has the tokenizer's vocabulary: dims.vocab_size and
// vocab (each id's text), e.g. for an objective that treats some tokens apart.
class Objective {
 public:
  static constexpr const char* kFamily = "objective";
  virtual ~Objective() = default;
  // True if the model's attention must be causal, false if it must be bidirectional
  // (the trainer refuses a model whose attention differs: model.hpp causal()).
  virtual bool causal() const = 0;
  // Token ids the objective adds after the tokenizer's: ids vocab .. vocab + extra - 1
  // (masked_lm: 1, its mask token). The model's vocabulary is the sum.
  virtual int64_t extra_tokens() const { return 0; }
  // Whether text sampled from the trained model means anything (the trainer's sample).
  virtual bool generates() const { return true; }
  // Turns B windows of T tokens into the model's inputs and targets, in place. On entry
  // x[i] is a token and y[i] the one after it (-1 past the end of a padded window); on
  // return x is what the model reads and y[i] the id position i is scored on (-1: not
  // scored; at least one scored position). `vocab` is the tokenizer's size; `rng` a
  // stream of the trainer's, the same on every data-parallel rank.
  virtual void prepare(int32_t* x, int32_t* y, int64_t batch, int64_t time, int64_t vocab,
                       Rng& rng) const = 0;
  // Whether loss() and metrics() read logits of `cols` columns per position, for a model
  // vocabulary of `vocab` ids: one column per id unless the objective is written for another
  // head (e.g. a multi-token-prediction head's several blocks of V). A run whose head gives a
  // width its objective does not read stops before training, naming both.
  virtual bool reads_logits(int64_t cols, int64_t vocab) const { return cols == vocab; }
  // The loss of logits (n, V) against the prepared targets y as a sum and a count (LossSum,
  // ops.hpp): `sum` adds up the losses of the scored positions, `count` is how many there are
  // (the positions with y[i] >= 0; the trainer stops on another count). The framework divides
  // once, by the count of the whole step (every data-parallel rank's slice, every
  // gradient-accumulation micro-batch), so a step trains on the mean over all its scored
  // positions, as one batch of them all would; logged losses are that mean. Default:
  // cross-entropy.
  virtual LossSum loss(Graph& g, Var logits, const int32_t* y, int64_t n) const {
    return cross_entropy_sum(g, logits, y, n);
  }
  // Metrics of one evaluation batch besides the loss (means over its scored positions),
  // e.g. {"accuracy", 0.41}; the trainer averages them over batches and logs them as
  // train_<name> and val_<name> in the eval table.
  virtual std::vector<std::pair<std::string, double>> metrics(const Tensor& logits,
                                                              const int32_t* y, int64_t n) const {
    return {};
  }
  // What metrics()' columns mean for comparisons (metric_spec.hpp; without the train_ and
  // val_ prefixes): which way is better and their range. A column left out is judged by its name.
  virtual std::vector<MetricSpec> metric_specs() const { return {}; }
};

}  // namespace ablate
