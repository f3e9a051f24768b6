// Checks on a model's parameters during training: the global gradient norm (clipping), what
// went non-finite when a step's loss or gradient is, and a hash that tells whether the
// data-parallel ranks hold the same weights. Internal to the train layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ablate/tensor.hpp"

namespace ablate {

double global_grad_norm(const std::vector<Parameter*>& params);

// The error of a step whose loss or gradient norm is not finite: the first parameter with
// non-finite values (the cause: the previous update overflowed) or gradient (the symptom),
// else the largest value, and what to do.
std::string non_finite_error(const std::vector<Parameter*>& params, int64_t step, double loss,
                             double norm);

// FNV-1a over the bits of every parameter: equal on every rank while their weights are.
uint64_t weights_hash(const std::vector<Parameter*>& params);

}  // namespace ablate
