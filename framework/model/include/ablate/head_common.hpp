// The shared body of the linear LM heads, so that a variant file only says what it does to
// the logits: z = x W + b with W (C, V) of its own ("weight", Role::kHead), or
// z = x E^T + b with the token embedding E (V, C) when model.tie_embeddings ties them
// (Press & Wolf 2017); b (1, V) when model.head_bias.
#pragma once
#include <string>

#include "ablate/head.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace ablate {

class LinearHead : public Head {
 public:
  LinearHead(const Options& o, const BuildContext& c) : embedding_(c.tied_embedding) {
    const int64_t C = c.dims.d_model, V = c.dims.vocab_size;
    if (C <= 0 || V <= 0)
      o.fail("", "d_model and vocab_size must be positive, got d_model = " + std::to_string(C) +
                     ", vocab_size = " + std::to_string(V));
    if (embedding_ && (embedding_->value.rows != V || embedding_->value.cols != C))
      o.fail("", "the tied token embedding is (" + std::to_string(embedding_->value.rows) + ", " +
                     std::to_string(embedding_->value.cols) +
                     "), expected (vocab_size, d_model) = (" + std::to_string(V) + ", " +
                     std::to_string(C) + ")");
    ParamScope ps = c.params;
    if (!embedding_) w_ = &ps.add("weight", C, V, Role::kHead);
    if (c.dims.bias) b_ = &ps.add("bias", 1, V, Role::kBias);
  }

  const Tensor* weight() const override { return w_ ? &w_->value : nullptr; }

 protected:
  // z (B*T, V), before what the variant does to it.
  Var project(Graph& g, Var x) const {
    Var bias = b_ ? g.param(*b_) : Var{};
    if (embedding_) return linear(g, x, g.param(*embedding_), bias, /*transpose_w=*/true);
    return linear(g, x, g.param(*w_), bias);
  }

 private:
  Parameter* embedding_ = nullptr;
  Parameter* w_ = nullptr;
  Parameter* b_ = nullptr;
};

}  // namespace ablate
