// Layer normalisation (Ba et al. 2016): (x - mean) / sqrt(var + eps) * gain + shift per row.
// x (B*T, C) -> (B*T, C); gain and shift (1, C), each optional (scale: false gives the
// "pre-LayerNorm without learned scale" of the single-block JAX seed).
#include "ablate/norm.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class LayerNorm final : public ablate::Norm {
 public:
  LayerNorm(const ablate::Options& o, const ablate::BuildContext& c)
      : eps_(o.get_in<float>("eps", 1e-5f, 1e-12f, 1.0f, "added to the variance")) {
    bool scale = o.get<bool>("scale", true, "learned gain (1, C), initialised to 1");
    bool shift =
        o.get<bool>("shift", scale, "learned shift (1, C), initialised to 0 (default: as scale)");
    if (c.dims.d_model <= 0)
      o.fail("", "d_model must be positive, got " + std::to_string(c.dims.d_model));
    ablate::ParamScope ps = c.params;
    if (scale) gain_ = &ps.add("weight", 1, c.dims.d_model, ablate::Role::kGain);
    if (shift) bias_ = &ps.add("bias", 1, c.dims.d_model, ablate::Role::kBias);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    return ablate::layernorm(g, x, gain_ ? g.param(*gain_) : ablate::Var{},
                             bias_ ? g.param(*bias_) : ablate::Var{}, eps_);
  }

 private:
  float eps_;
  ablate::Parameter* gain_ = nullptr;
  ablate::Parameter* bias_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Norm, layernorm, LayerNorm,
              "layer normalisation with optional learned scale and shift")
