// Small init (Nguyen & Salazar 2019, "Transformers without Tears"; GPT-NeoX's `small_init`):
// every matrix N(0, sqrt(2 / (5 d))) with d = d_model, so that the initial updates are
// small next to the weights; residual-output matrices take GPT-NeoX's companion
// `wang_init` (Wang & Komatsuzaki, GPT-J): N(0, 2 / (n_layers sqrt(d))), or the same small
// std with `residual: small`. Gains 1, biases 0.
#include <algorithm>
#include <cmath>

#include "ablate/init.hpp"

namespace {

class SmallInit final : public ablate::Initializer {
 public:
  SmallInit(const ablate::Options& o, const ablate::BuildContext& c) {
    const float d = static_cast<float>(c.dims.d_model),
                L = static_cast<float>(std::max<int64_t>(1, c.dims.n_layers));
    std_ = std::sqrt(2.0f / (5.0f * d));
    const std::string r = o.get_choice(
        "residual", "wang", {"wang", "small"},
        "residual-output matrices: wang = 2 / (n_layers sqrt(d)), small = sqrt(2 / (5 d))");
    residual_std_ = r == "wang" ? 2.0f / (L * std::sqrt(d)) : std_;
  }

  void initialise(ablate::Parameter& p, ablate::Rng& rng) const override {
    using ablate::Role;
    switch (p.role) {
      case Role::kGain: ablate::fill(p.value, 1.0f); break;
      case Role::kBias: ablate::fill(p.value, 0.0f); break;
      case Role::kResidualOut: ablate::fill_normal(p.value, rng, residual_std_); break;
      default: ablate::fill_normal(p.value, rng, std_); break;
    }
  }

 private:
  float std_ = 0, residual_std_ = 0;
};

}  // namespace
ABLATE_PLUGIN(
    ablate::Initializer, small_init, SmallInit,
    "small init (Nguyen & Salazar 2019): N(0, sqrt(2/(5d))), residual outputs 2/(n_layers sqrt(d))")
