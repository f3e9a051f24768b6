// Evaluating a model during a run: the mean loss, the objective's metrics and bits per byte
// over fixed batches of the train or validation part, split across data-parallel ranks.
// Internal to the train layer.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/communicator.hpp"
#include "setup.hpp"

namespace ablate {

// The rows of a global batch of B sequences that rank r of n computes: [lo, hi).
struct Slice {
  int64_t lo = 0, hi = 0;
};
Slice batch_slice(int64_t B, const Communicator& c);

// Targets that count in the loss (not padding) among n.
int64_t counted_targets(const int32_t* y, int64_t n);

// The mean loss and the objective's metrics over a fixed set of batches (the same batches,
// and the same masks, at every evaluation, so that evaluations of one run, and of runs with
// the same seed, are directly comparable); each value is the mean over every scored target of
// the batches (the objective's summed loss over their count), as one batch of them all would
// give. With several ranks each computes its slice of every batch and the sums are added.
// `full` (train.eval_full): the whole part in consecutive windows instead. The last entry is
// "bpb", bits per byte over all the batches' scored targets (ByteLoss, evaluator.hpp).
std::vector<std::pair<std::string, double>> evaluate(Model& m, const Objective& obj, Graph& g,
                                                     const TextData& data, bool train,
                                                     const TrainConfig& t, int64_t T, uint64_t seed,
                                                     std::vector<int32_t>& x,
                                                     std::vector<int32_t>& y, Communicator& comm,
                                                     const std::vector<int32_t>& token_bytes,
                                                     bool full = false);

}  // namespace ablate
