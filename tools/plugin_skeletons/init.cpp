// my_init: an initialisation for ablate (family "init"), from `ablate plugin new init my_init`.
// Plugins create parameters with a role (tensor.hpp: ablate::Role); an init variant sets
// their values by role and shape, once, in creation order, drawing from `rng`.
// As generated: LeCun normal, N(0, gain / sqrt(fan_in)), for every matrix (a weight is
// stored (in, out), so fan_in = rows), gains 1, biases 0.
#include <cmath>

#include "ablate/init.hpp"

namespace {

class MyInit final : public ablate::Initializer {
 public:
  MyInit(const ablate::Options& o, const ablate::BuildContext&)
      : gain_(o.get_in<float>("gain", 1.0f, 0.0f, 100.0f, "multiplies the std 1 / sqrt(fan_in)")) {}

  void initialise(ablate::Parameter& p, ablate::Rng& rng) const override {
    switch (p.role) {
      case ablate::Role::kGain: ablate::fill(p.value, 1.0f); break;
      case ablate::Role::kBias: ablate::fill(p.value, 0.0f); break;
      default:  // embeddings, positions, hidden and residual-output matrices, the head
        ablate::fill_normal(p.value, rng, gain_ / std::sqrt(static_cast<float>(p.value.rows)));
    }
  }

 private:
  float gain_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Initializer, my_init, MyInit, "LeCun normal: N(0, 1/sqrt(fan_in)), gains 1, biases 0")
