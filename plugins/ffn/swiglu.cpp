// SwiGLU feed-forward network (Shazeer 2020; LLaMA): (silu(x W) * x V) W2.
// x (B*T, C); W, V (C, H); W2 (H, C); H = ffn_multiplier * floor(2C/3) by default.
#include "ablate/ffn_common.hpp"

namespace {

class Swiglu final : public ablate::GatedFfn {
 public:
  Swiglu(const ablate::Options& o, const ablate::BuildContext& c) : GatedFfn(o, c) {}

 protected:
  ablate::Var activation(ablate::Graph& g, ablate::Var x) const override {
    return ablate::silu(g, x);
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Ffn, swiglu, Swiglu, "gated FFN with SiLU gate (Shazeer 2020, LLaMA)")
