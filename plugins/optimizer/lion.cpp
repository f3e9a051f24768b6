// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): p *= 1 - lr*wd
// (decoupled, parameters marked for decay); p -= lr * sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g.
// State per parameter: the momentum m. Use a 3-10x smaller lr than AdamW.
#include <string>
#include <tuple>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/plugin.hpp"

namespace {

class Lion final : public ablate::Optimizer {
 public:
  Lion(const ablate::Options& o, const ablate::BuildContext&)
      : lr_(o.get_in<float>("lr", 1e-4f, 1e-12f, 10.0f,
                            "base learning rate (3-10x below AdamW's)")),
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 100.0f,
                            "decoupled weight decay (3-10x above AdamW's)")) {
    std::tie(b1_, b2_) =
        ablate::read_betas(o, "betas", {0.9f, 0.99f}, "[beta1, beta2], each in [0, 1)");
  }

  void init(const std::vector<ablate::Parameter*>& params) override { state_.init(params); }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    state_.check(params, step);
    // Elementwise: spans of 16K of all parameters on ablate's threads (no effect on the result).
    ablate::parallel_for_params(params, int64_t{1} << 14, [&](size_t i, int64_t j0, int64_t j1) {
      ablate::Parameter& p = *params[i];
      float* w = p.value.data;
      const float* g = p.grad.data;
      float* m = state_.at(0, i);
      const float decay = p.weight_decay() ? 1.0f - lr * wd_ : 1.0f;
      for (int64_t j = j0; j < j1; ++j) {
        const float c = b1_ * m[j] + (1.0f - b1_) * g[j];
        const float sign = static_cast<float>((c > 0.0f) - (c < 0.0f));
        w[j] = w[j] * decay - lr * sign;
        m[j] = b2_ * m[j] + (1.0f - b2_) * g[j];
      }
    });
  }

  float base_lr() const override { return lr_; }

  std::vector<ablate::StateBuffer> state() override { return state_.state(); }

 private:
  float lr_, wd_, b1_ = 0.9f, b2_ = 0.99f;
  ablate::SlotState state_{"lion", {"m"}};
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, lion, Lion,
              "Lion: sign of interpolated momentum (Chen et al. 2023)")
