// Schedule-free AdamW (Defazio, Yang, Mehta, Mishchenko, Khaled, Cutkosky 2024, "The Road
// Less Scheduled"; the reference is facebookresearch/schedule_free, AdamWScheduleFree).
// Three sequences per parameter: z takes AdamW-like steps, x is a weighted average of the
// z's (the answer), and gradients are taken at y = (1 - beta1) z + beta1 x. With
// gamma_t = lr_t * sqrt(1 - beta2^t) and weights w_t = max_{s<=t} gamma_s^2:
//   v <- beta2 v + (1 - beta2) g^2;  z <- z - gamma_t (g / (sqrt(v) + eps) + wd y)
//   x <- (1 - c) x + c z with c = w_t / sum_{s<=t} w_s;  parameters <- y
// No decaying schedule is needed (use scheduler: constant, with a warmup). Evaluation,
// checkpoints and samples should use x: eval_point() writes x into the parameters,
// train_point() writes y back from z and x (the same code as the step, so bit for bit).
// State: "z.<name>", "x.<name>", "v.<name>", and "sums" (lr_max and the weight sum, each
// as a pair of floats).
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/plugin.hpp"

namespace {

class ScheduleFree final : public ablate::Optimizer {
 public:
  ScheduleFree(const ablate::Options& o, const ablate::BuildContext&)
      : lr_(o.get_in<float>("lr", 2.5e-3f, 1e-12f, 10.0f,
                            "base learning rate (the reference's default 0.0025)")),
        eps_(o.get_in<float>("eps", 1e-8f, 1e-30f, 1.0f, "added to sqrt(v)")),
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 10.0f,
                            "weight decay at y, on roles that decay (tensor.hpp)")) {
    std::tie(b1_, b2_) = ablate::read_betas(o, "betas", {0.9f, 0.999f},
                                            "[beta1 (interpolation), beta2], each in [0, 1)");
  }

  void init(const std::vector<ablate::Parameter*>& params) override {
    state_.init(params);  // z and x start at the parameters, v at 0
    for (size_t i = 0; i < params.size(); ++i) {
      const float* p = params[i]->value.data;
      std::copy(p, p + params[i]->value.numel(), state_.at(kZ, i));
      std::copy(p, p + params[i]->value.numel(), state_.at(kX, i));
    }
    sums_.assign(4, 0.0f);
  }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    state_.check(params, step);
    double lr_max = sum(0), weight_sum = sum(1);
    const double gamma =
        static_cast<double>(lr) *
        std::sqrt(1.0 - std::pow(static_cast<double>(b2_), static_cast<double>(step)));
    lr_max = std::max(lr_max, gamma);
    const double weight = lr_max * lr_max;
    weight_sum += weight;
    set_sum(0, lr_max);
    set_sum(1, weight_sum);
    const float c = weight_sum > 0 ? static_cast<float>(weight / weight_sum) : 0.0f;
    const float gm = static_cast<float>(gamma), b2 = b2_, eps = eps_;
    ablate::parallel_for_params(params, int64_t{1} << 14, [&](size_t i, int64_t j0, int64_t j1) {
      const ablate::Parameter& p = *params[i];
      const float wd = p.weight_decay() ? wd_ : 0.0f;
      const float* y = p.value.data;
      const float* g = p.grad.data;
      float *z = state_.at(kZ, i), *x = state_.at(kX, i), *v = state_.at(kV, i);
      for (int64_t j = j0; j < j1; ++j) {
        v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
        z[j] -= gm * (g[j] / (std::sqrt(v[j]) + eps) + wd * y[j]);
        x[j] = (1.0f - c) * x[j] + c * z[j];
      }
    });
    train_point(params);
  }

  float base_lr() const override { return lr_; }

  std::vector<ablate::StateBuffer> state() override {
    std::vector<ablate::StateBuffer> s = state_.state();
    s.push_back({"sums", &sums_});
    return s;
  }

  void eval_point(const std::vector<ablate::Parameter*>& params) override {
    state_.check(params, 1);
    for (size_t i = 0; i < params.size(); ++i)
      std::copy(state_.at(kX, i), state_.at(kX, i) + params[i]->value.numel(),
                params[i]->value.data);
  }

  void train_point(const std::vector<ablate::Parameter*>& params) override {
    state_.check(params, 1);
    const float b1 = b1_;
    ablate::parallel_for_params(params, int64_t{1} << 14, [&](size_t i, int64_t j0, int64_t j1) {
      float* y = params[i]->value.data;
      const float *z = state_.at(kZ, i), *x = state_.at(kX, i);
      for (int64_t j = j0; j < j1; ++j) y[j] = (1.0f - b1) * z[j] + b1 * x[j];
    });
  }

 private:
  // The two running scalars, each kept as a float pair hi + lo (about 48 bits), so that
  // they are float state buffers that checkpoints save exactly.
  double sum(size_t i) const {
    return static_cast<double>(sums_[2 * i]) + static_cast<double>(sums_[2 * i + 1]);
  }
  void set_sum(size_t i, double d) {
    sums_[2 * i] = static_cast<float>(d);
    sums_[2 * i + 1] = static_cast<float>(d - static_cast<double>(sums_[2 * i]));
  }

  float lr_, eps_, wd_, b1_ = 0.9f, b2_ = 0.999f;
  enum Slot : size_t { kZ, kX, kV };
  ablate::SlotState state_{"schedule_free", {"z", "x", "v"}};
  std::vector<float> sums_ = std::vector<float>(4, 0.0f);  // lr_max and the weight sum, hi and lo
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, schedule_free, ScheduleFree,
              "schedule-free AdamW (Defazio et al. 2024): evaluates the average x")
