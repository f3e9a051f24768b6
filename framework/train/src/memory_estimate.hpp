// The memory a run needs (MemoryEstimate, trainer.hpp): its parameters, gradients and
// optimizer state counted, its activations measured by a forward and backward pass at one
// and two sequences (at one alone for a micro-batch of one). Internal to the train layer.
#pragma once
#include <cstdint>

#include "setup.hpp"

namespace ablate {

// Memory of a run at its micro-batch of `rows` sequences. The probe runs a forward and
// backward pass at 1 and 2 sequences (1 alone where rows is 1) on a graph of its own; it touches no
// state the run carries (its gradients are zeroed again at every step). The optimizer must be
// initialised.
MemoryEstimate estimate_memory(Setup& s, int64_t rows);

}  // namespace ablate
