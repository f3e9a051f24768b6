// GPT-2's initialisation (Radford et al. 2019; nanoGPT): every matrix N(0, std) with
// std = 0.02, except those that write into the residual stream, whose std is divided by
// sqrt(2 * n_layers) so that the residual's variance does not grow with depth (two such
// writes per block). Gains 1, biases 0.
#include <algorithm>
#include <cmath>

#include "ablate/init.hpp"

namespace {

class Gpt2 final : public ablate::Initializer {
 public:
  Gpt2(const ablate::Options& o, const ablate::BuildContext& c)
      : std_(o.get_in<float>("std", 0.02f, 0.0f, 10.0f,
                             "std of every matrix (embeddings, positions, hidden, head)")),
        residual_std_(
            o.get<bool>("scale_residual", true,
                        "divide the std of residual-output matrices by sqrt(2 * n_layers)")
                ? std_ / std::sqrt(2.0f * static_cast<float>(std::max<int64_t>(1, c.dims.n_layers)))
                : std_) {}

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
  float std_, residual_std_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Initializer, gpt2, Gpt2,
              "GPT-2: N(0, 0.02), residual outputs 0.02/sqrt(2 n_layers), gains 1, biases 0")
