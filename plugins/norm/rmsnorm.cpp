// RMS normalisation (Zhang & Sennrich 2019; LLaMA): x / sqrt(mean(x^2) + eps) * gain.
// x (B*T, C) -> (B*T, C); gain (1, C), optional.
#include "ablate/norm.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class RmsNorm final : public ablate::Norm {
 public:
  RmsNorm(const ablate::Options& o, const ablate::BuildContext& c)
      : eps_(o.get_in<float>("eps", 1e-5f, 1e-12f, 1.0f, "added to the mean square")) {
    bool scale = o.get<bool>("scale", true, "learned gain (1, C), initialised to 1");
    if (c.dims.d_model <= 0)
      o.fail("", "d_model must be positive, got " + std::to_string(c.dims.d_model));
    ablate::ParamScope ps = c.params;
    if (scale) gain_ = &ps.add("weight", 1, c.dims.d_model, ablate::Role::kGain);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    return ablate::rmsnorm(g, x, gain_ ? g.param(*gain_) : ablate::Var{}, eps_);
  }

 private:
  float eps_;
  ablate::Parameter* gain_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Norm, rmsnorm, RmsNorm,
              "RMS normalisation with optional learned gain (LLaMA)")
