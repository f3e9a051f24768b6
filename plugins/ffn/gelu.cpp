// GELU feed-forward network (Hendrycks & Gimpel 2016; the FFN of GPT-2 and BERT).
// x (B*T, C) -> gelu(x W1 + b1) W2 + b2, W1 (C, H), W2 (H, C).
#include "ablate/ffn_common.hpp"

namespace {

class Gelu final : public ablate::UngatedFfn {
 public:
  Gelu(const ablate::Options& o, const ablate::BuildContext& c)
      : UngatedFfn(o, c),
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
ABLATE_PLUGIN(ablate::Ffn, gelu, Gelu, "two-layer FFN with GELU (GPT-2)")
