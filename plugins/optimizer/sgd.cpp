// Stochastic gradient descent with optional (Nesterov) momentum, as torch.optim.SGD:
// g += wd*p (L2, parameters marked for decay); buf = mu*buf + g; p -= lr*(nesterov ? g + mu*buf : buf).
// State per parameter (only with momentum): the velocity buffer.
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
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 10.0f, "L2 penalty added to the gradient")) {
    if (nesterov_ && momentum_ <= 0.0f) o.fail("nesterov", "Nesterov momentum needs momentum > 0; set momentum (e.g. 0.9)");
  }

  void init(const std::vector<ablate::Parameter*>& params) override {
    names_.clear(), buf_.clear();
    sizes_.clear();
    for (const ablate::Parameter* p : params) {
      names_.push_back(p->name);
      sizes_.push_back(static_cast<size_t>(p->value.numel()));
      if (momentum_ > 0.0f) buf_.emplace_back(sizes_.back(), 0.0f);
    }
  }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    if (params.size() != sizes_.size())
      throw ablate::Error("sgd: step() got " + std::to_string(params.size()) + " parameters but init() got " +
                          std::to_string(sizes_.size()) + "; call init() with the same parameters");
    for (size_t i = 0; i < params.size(); ++i)
      if (static_cast<size_t>(params[i]->value.numel()) != sizes_[i])
        throw ablate::Error("sgd: parameter '" + params[i]->name + "' changed size since init()");
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
      float* b = buf_[i].data();
      for (int64_t j = j0; j < j1; ++j) {
        const float gj = g[j] + l2 * w[j];
        b[j] = momentum_ * b[j] + gj;
        w[j] -= lr * (nesterov_ ? gj + momentum_ * b[j] : b[j]);
      }
    });
  }

  float base_lr() const override { return lr_; }

  std::vector<ablate::StateBuffer> state() override {
    std::vector<ablate::StateBuffer> s;
    for (size_t i = 0; i < buf_.size(); ++i) s.push_back({"momentum." + names_[i], &buf_[i]});
    return s;
  }

 private:
  float lr_, momentum_;
  bool nesterov_;
  float wd_;
  std::vector<std::string> names_;
  std::vector<size_t> sizes_;
  std::vector<std::vector<float>> buf_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, sgd, Sgd, "SGD with optional (Nesterov) momentum (torch.optim.SGD)")
