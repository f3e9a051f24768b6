// GPT-2's initialisation with the residual-output matrices at zero (modded-nanogpt, nanochat):
// every block starts as the identity on the residual stream, and the attention and FFN output
// projections grow from 0 as training goes; the other matrices N(0, std), gains 1, biases 0.
// The zeroed matrices still draw their normal values first, so that every other parameter
// has the same initial values as under `gpt2` with the same seed (paired comparisons).
#include "ablate/init.hpp"

namespace {

class ZeroOut final : public ablate::Initializer {
 public:
  ZeroOut(const ablate::Options& o, const ablate::BuildContext&)
      : std_(o.get_in<float>("std", 0.02f, 0.0f, 10.0f,
                             "std of every matrix but the residual outputs (embeddings, positions, "
                             "hidden, head)")) {}

  void initialise(ablate::Parameter& p, ablate::Rng& rng) const override {
    using ablate::Role;
    switch (p.role) {
      case Role::kGain: ablate::fill(p.value, 1.0f); break;
      case Role::kBias: ablate::fill(p.value, 0.0f); break;
      case Role::kResidualOut:
        ablate::fill_normal(p.value, rng, std_);  // drawn, so the stream stays gpt2's
        ablate::fill(p.value, 0.0f);
        break;
      default: ablate::fill_normal(p.value, rng, std_); break;
    }
  }

 private:
  float std_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Initializer, zero_out, ZeroOut,
              "GPT-2's init with residual-output projections at 0 (modded-nanogpt)")
