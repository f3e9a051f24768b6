// SiLU / Swish feed-forward network (Elfwing et al. 2017; Ramachandran et al. 2017), ungated.
// x (B*T, C) -> silu(x W1 + b1) W2 + b2, W1 (C, H), W2 (H, C).
#include "ablate/ffn_common.hpp"

namespace {

class Silu final : public ablate::UngatedFfn {
 public:
  Silu(const ablate::Options& o, const ablate::BuildContext& c) : UngatedFfn(o, c) {}

 protected:
  ablate::Var activation(ablate::Graph& g, ablate::Var x) const override {
    return ablate::silu(g, x);
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Ffn, silu, Silu, "two-layer FFN with SiLU (Swish)")
