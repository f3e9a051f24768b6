// AdamW (Loshchilov & Hutter 2019), as torch.optim.AdamW: decoupled weight decay
// p -= lr*wd*p on parameters marked for decay, then Adam with bias correction.
// State per parameter: first and second moments m, v (same shape as the parameter).
#include <cmath>
#include <string>
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
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 10.0f, "decoupled weight decay (GPT-2 recipe: 0.1)")) {
    std::vector<float> b = o.get<std::vector<float>>("betas", {0.9f, 0.999f}, "[beta1, beta2], each in [0, 1)");
    if (b.size() != 2) o.fail("betas", "expected two numbers [beta1, beta2], got " + std::to_string(b.size()));
    for (float x : b)
      if (!(x >= 0.0f && x < 1.0f)) o.fail("betas", std::to_string(x) + " is out of range; each beta must be in [0, 1)");
    b1_ = b[0], b2_ = b[1];
  }

  void init(const std::vector<ablate::Parameter*>& params) override {
    names_.clear(), m_.clear(), v_.clear();
    for (const ablate::Parameter* p : params) {
      names_.push_back(p->name);
      m_.emplace_back(static_cast<size_t>(p->value.numel()), 0.0f);
      v_.emplace_back(static_cast<size_t>(p->value.numel()), 0.0f);
    }
  }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    check(params, step);
    // torch's form: p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
    const float step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(b1_), static_cast<double>(step))));
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(b2_), static_cast<double>(step))));
    // Elementwise: spans of 16K of all parameters on ablate's threads (no effect on the result).
    ablate::parallel_for_params(params, int64_t{1} << 14, [&](size_t i, int64_t j0, int64_t j1) {
      ablate::Parameter& p = *params[i];
      float* w = p.value.data;
      const float* g = p.grad.data;
      float* m = m_[i].data();
      float* v = v_[i].data();
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

  std::vector<ablate::StateBuffer> state() override {
    std::vector<ablate::StateBuffer> s;
    for (size_t i = 0; i < names_.size(); ++i) s.push_back({"m." + names_[i], &m_[i]});
    for (size_t i = 0; i < names_.size(); ++i) s.push_back({"v." + names_[i], &v_[i]});
    return s;
  }

 private:
  void check(const std::vector<ablate::Parameter*>& params, int64_t step) const {
    if (step < 1) throw ablate::Error("adamw: step counts from 1, got " + std::to_string(step));
    if (params.size() != m_.size())
      throw ablate::Error("adamw: step() got " + std::to_string(params.size()) + " parameters but init() got " +
                          std::to_string(m_.size()) + "; call init() with the same parameters");
    for (size_t i = 0; i < params.size(); ++i)
      if (static_cast<size_t>(params[i]->value.numel()) != m_[i].size())
        throw ablate::Error("adamw: parameter '" + params[i]->name + "' changed size since init()");
  }

  float lr_, eps_, wd_, b1_ = 0.9f, b2_ = 0.999f;
  std::vector<std::string> names_;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, adamw, AdamW, "Adam with decoupled weight decay (torch.optim.AdamW)")
