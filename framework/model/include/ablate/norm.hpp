// Family "norm": a normalisation over channels. Where norms sit is the block's business
// (block.hpp: prenorm, postnorm, ...); the final norm the model's (model.norm.final).
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
