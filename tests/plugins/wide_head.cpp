// Test plugin: a head that gives two logits per token id (2V columns), as a multi-token
// prediction head would: the trainer must refuse it with an objective that reads V.
#include "ablate/head.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class WideHead final : public ablate::Head {
 public:
  WideHead(const ablate::Options&, const ablate::BuildContext& c) {
    ablate::ParamScope ps = c.params;
    w_ = &ps.add("weight", c.dims.d_model, 2 * c.dims.vocab_size, ablate::Role::kHead);
  }
  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    return ablate::linear(g, x, g.param(*w_));
  }

 private:
  ablate::Parameter* w_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Head, wide_head, WideHead, "test: two logits per token id")
