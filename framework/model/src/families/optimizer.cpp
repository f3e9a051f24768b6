// Family "optimizer": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new optimizer NAME`; its conformance checks are in conformance/optimizer.cpp.
#include "ablate/optimizer.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: an optimizer for ablate (family "optimizer"), from `ablate plugin new optimizer @NAME@`.
// State is exposed as named buffers so that checkpoints save and restore it bit for bit
// (ablate::SlotState keeps per-parameter buffers and names them). As generated: SGD with
// momentum and decoupled weight decay (SGDW, Loshchilov & Hutter 2019):
// p -= lr * wd * p (decayed parameters only); m = mu * m + g; p -= lr * m.
#include <string>
#include <vector>

#include "ablate/optimizer.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Optimizer {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : lr_(o.get_in<float>("lr", 1e-2f, 1e-12f, 100.0f, "base learning rate (the scheduler multiplies it)")),
        momentum_(o.get_in<float>("momentum", 0.9f, 0.0f, 0.9999f, "momentum factor mu")),
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 10.0f, "decoupled weight decay")) {}

  void init(const std::vector<ablate::Parameter*>& params) override { state_.init(params); }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    state_.check(params, step);  // the parameters init() saw
    // One thread; ablate::parallel_for_params (ablate/ops.hpp) runs such a loop on all cores.
    for (size_t i = 0; i < params.size(); ++i) {
      ablate::Parameter& p = *params[i];
      float* w = p.value.data;
      const float* g = p.grad.data;
      float* m = state_.at(0, i);  // slot 0 ("momentum") of parameter i
      const float decay = p.weight_decay() ? lr * wd_ : 0.0f;
      for (int64_t j = 0; j < p.value.numel(); ++j) {
        w[j] -= decay * w[j];
        m[j] = momentum_ * m[j] + g[j];
        w[j] -= lr * m[j];
      }
    }
  }

  float base_lr() const override { return lr_; }

  std::vector<ablate::StateBuffer> state() override { return state_.state(); }

 private:
  float lr_, momentum_, wd_;
  // One buffer per parameter for each slot, zero at init(), saved as "momentum.<parameter>".
  ablate::SlotState state_{"@NAME@", {"momentum"}};
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, @NAME@, @CLASS@, "SGD with momentum and decoupled weight decay (SGDW)")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Optimizer::kFamily;
  d.key = "optimizer";
  d.list = false;
  d.default_variant = "adamw";
  d.summary = "updates the parameters from their gradients";
  d.checks = &conformance::check_optimizer;
  d.template_summary = "SGD with momentum and decoupled weight decay";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
