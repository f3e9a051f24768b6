// Family "ffn": the position-wise feed-forward sublayer with its activation.
#pragma once
#include "ablate/graph.hpp"

namespace ablate {

class Ffn {
 public:
  static constexpr const char* kFamily = "ffn";
  virtual ~Ffn() = default;
  // x (B*T, C) -> (B*T, C).
  virtual Var forward(Graph& g, Var x) = 0;
};

}  // namespace ablate
