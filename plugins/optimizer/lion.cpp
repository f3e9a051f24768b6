// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): p *= 1 - lr*wd
// (decoupled, parameters marked for decay); p -= lr * sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g.
// State per parameter: the momentum m. Use a 3-10x smaller lr than AdamW.
#include <string>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/plugin.hpp"

namespace {

class Lion final : public ablate::Optimizer {
 public:
  Lion(const ablate::Options& o, const ablate::BuildContext&)
      : lr_(o.get_in<float>("lr", 1e-4f, 1e-12f, 10.0f, "base learning rate (3-10x below AdamW's)")),
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 100.0f, "decoupled weight decay (3-10x above AdamW's)")) {
    std::vector<float> b = o.get<std::vector<float>>("betas", {0.9f, 0.99f}, "[beta1, beta2], each in [0, 1)");
    if (b.size() != 2) o.fail("betas", "expected two numbers [beta1, beta2], got " + std::to_string(b.size()));
    for (float x : b)
      if (!(x >= 0.0f && x < 1.0f)) o.fail("betas", std::to_string(x) + " is out of range; each beta must be in [0, 1)");
    b1_ = b[0], b2_ = b[1];
  }

  void init(const std::vector<ablate::Parameter*>& params) override {
    names_.clear(), m_.clear();
    for (const ablate::Parameter* p : params) {
      names_.push_back(p->name);
      m_.emplace_back(static_cast<size_t>(p->value.numel()), 0.0f);
    }
  }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    if (params.size() != m_.size())
      throw ablate::Error("lion: step() got " + std::to_string(params.size()) + " parameters but init() got " +
                          std::to_string(m_.size()) + "; call init() with the same parameters");
    for (size_t i = 0; i < params.size(); ++i)
      if (static_cast<size_t>(params[i]->value.numel()) != m_[i].size())
        throw ablate::Error("lion: parameter '" + params[i]->name + "' changed size since init()");
    // Elementwise: spans of 16K of all parameters on ablate's threads (no effect on the result).
    ablate::parallel_for_params(params, int64_t{1} << 14, [&](size_t i, int64_t j0, int64_t j1) {
      ablate::Parameter& p = *params[i];
      float* w = p.value.data;
      const float* g = p.grad.data;
      float* m = m_[i].data();
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

  std::vector<ablate::StateBuffer> state() override {
    std::vector<ablate::StateBuffer> s;
    for (size_t i = 0; i < names_.size(); ++i) s.push_back({"m." + names_[i], &m_[i]});
    return s;
  }

 private:
  float lr_, wd_, b1_ = 0.9f, b2_ = 0.99f;
  std::vector<std::string> names_;
  std::vector<std::vector<float>> m_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, lion, Lion, "Lion: sign of interpolated momentum (Chen et al. 2023)")
