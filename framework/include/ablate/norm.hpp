// Family "norm": a normalisation over channels. Placement (pre/post) and the final
// norm are the model's business (model.norm.placement, model.norm.final).
#pragma once
#include "ablate/graph.hpp"

namespace ablate {

class Norm {
 public:
  static constexpr const char* kFamily = "norm";
  virtual ~Norm() = default;
  // x (B*T, C) -> (B*T, C).
  virtual Var forward(Graph& g, Var x) = 0;
};

}  // namespace ablate
