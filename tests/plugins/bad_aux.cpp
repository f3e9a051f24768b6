// Test plugin: an FFN (x W) that adds an auxiliary loss s^2, s the sum of its output, through
// a custom op whose backward has the wrong sign (ds = -2 s dy), weighted 0.001 in training:
// `ablate plugin check` must fail the auxiliary terms' gradient check, which a term this small
// cannot pass by hiding behind the output's gradient. With nan_at_step: S the term is NaN from
// training step S on, which must stop the run with the term's name and layer.
#include <cmath>

#include "ablate/custom_op.hpp"
#include "ablate/ffn.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

struct WrongSquare {
  static constexpr const char* kName = "bad_aux_square";
  static void forward(ablate::OpContext& op) {
    op.out().data[0] = op.in(0).data[0] * op.in(0).data[0] * op.attr(0);
  }
  static void backward(ablate::OpContext& op) {
    if (!op.needs_grad(0)) return;
    op.grad_in(0).data[0] += -2.0f * op.in(0).data[0] * op.grad_out().data[0];  // planted error
  }
};

class BadAux final : public ablate::Ffn {
 public:
  BadAux(const ablate::Options& o, const ablate::BuildContext& c) : layer_(c.dims.layer) {
    nan_at_ =
        o.get_in<int64_t>("nan_at_step", 0, 0, 1000000, "training step from which the term is NaN");
    ablate::ParamScope ps = c.params;
    w_ = &ps.add("w.weight", c.dims.d_model, c.dims.d_model, ablate::Role::kHidden);
  }
  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    ablate::Var y = ablate::linear(g, x, g.param(*w_));
    const bool nan = nan_at_ > 0 && g.training && g.step >= static_cast<uint64_t>(nan_at_);
    ablate::Var aux =
        ablate::custom_op<WrongSquare>(g, {ablate::sum(g, y)}, 1, 1, {nan ? NAN : 1.0f});
    g.add_aux("bad_aux_square", aux, 0.001f, layer_);
    return y;
  }

 private:
  int64_t layer_, nan_at_ = 0;
  ablate::Parameter* w_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Ffn, bad_aux, BadAux, "test: an auxiliary loss with a wrong gradient")
