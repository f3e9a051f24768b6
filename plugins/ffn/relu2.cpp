// Squared-ReLU feed-forward network (So et al. 2021, Primer; modded-nanogpt).
// x (B*T, C) -> relu(x W1 + b1)^2 W2 + b2, W1 (C, H), W2 (H, C).
#include "ablate/ffn_common.hpp"

namespace {

class Relu2 final : public ablate::UngatedFfn {
 public:
  Relu2(const ablate::Options& o, const ablate::BuildContext& c) : UngatedFfn(o, c) {}

 protected:
  ablate::Var activation(ablate::Graph& g, ablate::Var x) const override {
    ablate::Var r = ablate::relu(g, x);
    return ablate::mul(g, r, r);
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Ffn, relu2, Relu2, "two-layer FFN with squared ReLU (Primer, modded-nanogpt)")
