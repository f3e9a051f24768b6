// Test plugin: a norm whose custom op has a backward off by a factor 2 (y = 3x, dx = 6 dy):
// `ablate plugin check` must fail its gradient check and name the op.
#include "ablate/custom_op.hpp"
#include "ablate/norm.hpp"
#include "ablate/plugin.hpp"

namespace {

struct Triple {
  static constexpr const char* kName = "bad_triple";
  static void forward(ablate::OpContext& op) {
    for (int64_t i = 0; i < op.in(0).numel(); ++i) op.out().data[i] = 3.0f * op.in(0).data[i];
  }
  static void backward(ablate::OpContext& op) {
    if (!op.needs_grad(0)) return;
    float* dx = op.grad_in(0).data;
    for (int64_t i = 0; i < op.in(0).numel(); ++i)
      dx[i] += 6.0f * op.grad_out().data[i];  // planted error
  }
};

class BadCustomOp final : public ablate::Norm {
 public:
  BadCustomOp(const ablate::Options&, const ablate::BuildContext&) {}
  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    const ablate::Tensor& X = g.value(x);
    return ablate::custom_op<Triple>(g, {x}, X.rows, X.cols);
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Norm, bad_custom_op, BadCustomOp, "a custom op with a wrong backward")
