// Stochastic gradient descent with optional (Nesterov) momentum, as torch.optim.SGD:
// g += wd*p (L2, parameters marked for decay); buf = mu*buf + g; p -= lr*(nesterov ? g + mu*buf :
// buf). State per parameter (only with momentum): the velocity buffer.
#include <string>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/plugin.hpp"

namespace {

class Sgd final : public ablate::Optimizer {
 public:
  Sgd(const ablate::Options& o, const ablate::BuildContext&)
      : lr_(o.get_in<float>("lr", 1e-2f, 1e-12f, 100.0f, "base learning rate")),
        momentum_(o.get_in<float>("momentum", 0.0f, 0.0f, 0.9999f, "momentum factor mu")),
        nesterov_(o.get<bool>("nesterov", false, "Nesterov momentum (needs momentum > 0)")),
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 10.0f,
                            "L2 penalty added to the gradient")) {
    if (nesterov_ && momentum_ <= 0.0f)
      o.fail("nesterov", "Nesterov momentum needs momentum > 0; set momentum (e.g. 0.9)");
  }

  void init(const std::vector<ablate::Parameter*>& params) override { state_.init(params); }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    state_.check(params, step);
    // Elementwise: spans of 16K of all parameters on ablate's threads (no effect on the result).
    ablate::parallel_for_params(params, int64_t{1} << 14, [&](size_t i, int64_t j0, int64_t j1) {
      ablate::Parameter& p = *params[i];
      float* w = p.value.data;
      const float* g = p.grad.data;
      const float l2 = p.weight_decay() ? wd_ : 0.0f;
      if (momentum_ == 0.0f) {
        for (int64_t j = j0; j < j1; ++j) w[j] -= lr * (g[j] + l2 * w[j]);
        return;
      }
      // torch starts the buffer at g on the first step: with a zero buffer mu*0 + g is the same.
      float* b = state_.at(0, i);
      for (int64_t j = j0; j < j1; ++j) {
        const float gj = g[j] + l2 * w[j];
        b[j] = momentum_ * b[j] + gj;
        w[j] -= lr * (nesterov_ ? gj + momentum_ * b[j] : b[j]);
      }
    });
  }

  float base_lr() const override { return lr_; }

  std::vector<ablate::StateBuffer> state() override { return state_.state(); }

 private:
  float lr_, momentum_;
  bool nesterov_;
  float wd_;
  // The velocity buffer, only with momentum.
  ablate::SlotState state_{
      "sgd", momentum_ > 0.0f ? std::vector<std::string>{"momentum"} : std::vector<std::string>{}};
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, sgd, Sgd,
              "SGD with optional (Nesterov) momentum (torch.optim.SGD)")
