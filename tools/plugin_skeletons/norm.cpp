// my_norm: a normalisation variant for ablate (family "norm"), from `ablate plugin new norm my_norm`.
// As generated: RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * gain.
// x (B*T, C) -> (B*T, C); gain (1, C). Placement (pre/post) is the model's business.
#include <string>

#include "ablate/norm.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class MyNorm final : public ablate::Norm {
 public:
  MyNorm(const ablate::Options& o, const ablate::BuildContext& c)
      : eps_(o.get_in<float>("eps", 1e-5f, 1e-12f, 1.0f, "added to the mean square")) {
    if (c.dims.d_model <= 0) o.fail("", "d_model must be positive, got " + std::to_string(c.dims.d_model));
    ablate::ParamScope ps = c.params;
    gain_ = &ps.add("weight", 1, c.dims.d_model, ablate::Role::kGain);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x) override { return ablate::rmsnorm(g, x, g.param(*gain_), eps_); }

 private:
  float eps_;
  ablate::Parameter* gain_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Norm, my_norm, MyNorm, "RMS normalisation with a learned gain")
