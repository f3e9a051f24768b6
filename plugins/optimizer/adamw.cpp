// AdamW (Loshchilov & Hutter 2019), as torch.optim.AdamW: decoupled weight decay
// p -= lr*wd*p on parameters marked for decay, then Adam with bias correction.
// State per parameter: first and second moments m, v (same shape as the parameter).
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/plugin.hpp"

namespace {

class AdamW final : public ablate::Optimizer {
 public:
  AdamW(const ablate::Options& o, const ablate::BuildContext&)
      : lr_(o.get_in<float>("lr", 1e-3f, 1e-12f, 10.0f, "base learning rate")),
        eps_(o.get_in<float>("eps", 1e-8f, 1e-30f, 1.0f, "added to sqrt(v)")),
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 10.0f,
                            "decoupled weight decay (GPT-2 recipe: 0.1)")) {
    std::tie(b1_, b2_) =
        ablate::read_betas(o, "betas", {0.9f, 0.999f}, "[beta1, beta2], each in [0, 1)");
  }

  void init(const std::vector<ablate::Parameter*>& params) override { state_.init(params); }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    state_.check(params, step);
    // torch's form: p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
    const float step_size = static_cast<float>(
        lr / (1.0 - std::pow(static_cast<double>(b1_), static_cast<double>(step))));
    const float inv_sqrt_bc2 = static_cast<float>(
        1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(b2_), static_cast<double>(step))));
    // Elementwise: spans of 16K of all parameters on ablate's threads (no effect on the result).
    ablate::parallel_for_params(params, int64_t{1} << 14, [&](size_t i, int64_t j0, int64_t j1) {
      ablate::Parameter& p = *params[i];
      float* w = p.value.data;
      const float* g = p.grad.data;
      float* m = state_.at(0, i);
      float* v = state_.at(1, i);
      const float decay = p.weight_decay() ? 1.0f - lr * wd_ : 1.0f;
      for (int64_t j = j0; j < j1; ++j) {
        w[j] *= decay;
        m[j] = b1_ * m[j] + (1.0f - b1_) * g[j];
        v[j] = b2_ * v[j] + (1.0f - b2_) * g[j] * g[j];
        w[j] -= step_size * m[j] / (std::sqrt(v[j]) * inv_sqrt_bc2 + eps_);
      }
    });
  }

  float base_lr() const override { return lr_; }

  std::vector<ablate::StateBuffer> state() override { return state_.state(); }

 private:
  float lr_, eps_, wd_, b1_ = 0.9f, b2_ = 0.999f;
  ablate::SlotState state_{"adamw", {"m", "v"}};
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, adamw, AdamW,
              "Adam with decoupled weight decay (torch.optim.AdamW)")
