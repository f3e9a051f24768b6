// ReLU feed-forward network (Vaswani et al. 2017; the FFN of GPT-1 and minGPT).
// x (B*T, C) -> relu(x W1 + b1) W2 + b2, W1 (C, H), W2 (H, C).
#include "ablate/ffn_common.hpp"

namespace {

class Relu final : public ablate::UngatedFfn {
 public:
  Relu(const ablate::Options& o, const ablate::BuildContext& c) : UngatedFfn(o, c) {}

 protected:
  ablate::Var activation(ablate::Graph& g, ablate::Var x) const override {
    return ablate::relu(g, x);
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Ffn, relu, Relu, "two-layer FFN with ReLU (GPT-1, minGPT)")
