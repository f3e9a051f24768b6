// Family "head": the LM head, from the last hidden states to logits over the vocabulary.
// Training, evaluation, sampling, generation and task decoding all take their logits from
// Model::forward, which ends with the model's head (model.head, default linear).
#pragma once
#include "ablate/graph.hpp"
#include "ablate/tensor.hpp"

namespace ablate {

class Head {
 public:
  static constexpr const char* kFamily = "head";
  virtual ~Head() = default;
  // x (B*T, C), after the final norm -> logits (B*T, V), each row from its own row of x
  // (decoding with KV caches feeds one position at a time). The constructor's
  // BuildContext has the vocabulary size (dims.vocab_size), the bias choice (dims.bias is
  // model.head_bias) and the token embedding when the head is tied to it
  // (tied_embedding, (V, C); read it with g.param).
  virtual Var forward(Graph& g, Var x) = 0;
  // The head's own (C, V) projection, for inspection (ablate inspect); null when it reads
  // the token embedding (tied) or has none.
  virtual const Tensor* weight() const { return nullptr; }
};

}  // namespace ablate
