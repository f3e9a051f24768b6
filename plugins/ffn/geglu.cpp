// GEGLU feed-forward network (Shazeer 2020): (gelu(x W) * x V) W2.
// x (B*T, C); W, V (C, H); W2 (H, C); H = ffn_multiplier * floor(2C/3) by default.
#include "ablate/ffn_common.hpp"

namespace {

class Geglu final : public ablate::GatedFfn {
 public:
  Geglu(const ablate::Options& o, const ablate::BuildContext& c)
      : GatedFfn(o, c),
        exact_(o.get_choice("approximate", "tanh", {"tanh", "none"},
                            "tanh: GPT-2's tanh approximation; none: exact x*Phi(x) with erf") ==
               "none") {}

 protected:
  ablate::Var activation(ablate::Graph& g, ablate::Var x) const override {
    return exact_ ? ablate::gelu_exact(g, x) : ablate::gelu(g, x);
  }

 private:
  bool exact_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Ffn, geglu, Geglu, "gated FFN with GELU gate (Shazeer 2020)")
