// The linear LM head (GPT-2): logits = x W + b, W (C, V) of its own or the token embedding
// transposed when model.tie_embeddings ties them; b when model.head_bias.
#include "ablate/head_common.hpp"

namespace {

class Linear final : public ablate::LinearHead {
 public:
  Linear(const ablate::Options& o, const ablate::BuildContext& c) : LinearHead(o, c) {}
  ablate::Var forward(ablate::Graph& g, ablate::Var x) override { return project(g, x); }
};

}  // namespace
ABLATE_PLUGIN(ablate::Head, linear, Linear, "linear LM head, tied to the embedding or not (GPT-2)")
