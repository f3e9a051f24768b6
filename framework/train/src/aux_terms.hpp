// The auxiliary terms of training steps (Graph::add_aux): per micro-batch each name's mean over
// its terms (the layers), weighted like the micro-batch's loss; summed over the micro-batches
// and the data-parallel ranks; the names fixed by the first step; a step whose sum is not
// finite stops with the term's name, layer and value. Internal to the train layer.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "ablate/communicator.hpp"
#include "ablate/graph.hpp"

namespace ablate {

class AuxTerms {
 public:
  // Before a step's first micro-batch.
  void begin_step();
  // One micro-batch's terms in g, at the weight of its loss. An Error for a name the first
  // step did not have.
  void add(Graph& g, int64_t step, float weight);
  // The ranks' sums (every rank has the same names: the same model).
  void allreduce(Communicator& comm);
  // Adds the step's sums to `window` by name; an Error naming a term that is not finite.
  void finish_step(int64_t step, std::map<std::string, double>& window) const;

 private:
  std::map<std::string, double> step_;                   // this step's sums, by name
  std::map<std::string, std::pair<double, int>> batch_;  // a micro-batch's sum and count by name
  bool named_ = false;  // step_ holds the names of the first step's terms
  struct Bad {
    std::string name;
    int64_t layer;
    double value;
  };
  std::optional<Bad> bad_;  // this rank's first non-finite term of the step
};

}  // namespace ablate
