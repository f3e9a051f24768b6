// Dynamic Tanh (Zhu, Chen, He, LeCun & Liu 2025, "Transformers without Normalization"):
// gamma * tanh(alpha x) + beta, alpha a learned scalar (init 0.5), gamma (1, C) init 1,
// beta (1, C) init 0. No statistics over the row: a drop-in for layernorm.
// x (B*T, C) -> (B*T, C). Fused as one custom op (ablate/custom_op.hpp) with a hand-written
// backward; `fused: false` composes the built-in ops instead (tanh, scalar broadcast), the
// reference the fused op is tested against.
#include <cmath>

#include "ablate/custom_op.hpp"
#include "ablate/norm.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

constexpr int64_t kRowsPerTask = 16;  // fixed chunks: results do not depend on the thread count

// inputs {x (N,C), alpha (1,1), gamma (1,C), beta (1,C)}; saved 0: tanh(alpha x).
struct DytOp {
  static constexpr const char* kName = "dyt";

  static void forward(ablate::OpContext& op) {
    const ablate::Tensor &x = op.in(0), &g = op.in(2), &b = op.in(3);
    const float a = op.in(1).data[0];
    const int64_t C = x.cols;
    float* t = op.save(0, static_cast<size_t>(x.numel()));
    float* y = op.out().data;
    ablate::parallel_for(x.rows, kRowsPerTask, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0, i = r * C; c < C; ++c, ++i) {
          t[i] = std::tanh(a * x.data[i]);
          y[i] = g.data[c] * t[i] + b.data[c];
        }
    });
  }

  static void backward(ablate::OpContext& op) {
    const ablate::Tensor &x = op.in(0), &g = op.in(2);
    const float a = op.in(1).data[0];
    const int64_t N = x.rows, C = x.cols;
    const float* t = op.saved(0);
    const float* dy = op.grad_out().data;
    // dx and per-row partial sums of dalpha = sum(dy * gamma * (1 - t^2) * x).
    double* row_alpha =
        op.graph().alloc_as<double>(static_cast<size_t>(N));  // arena: no allocation
    float* dx = op.needs_grad(0) ? op.grad_in(0).data : nullptr;
    ablate::parallel_for(N, kRowsPerTask, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = r * C + c;
          const float u = dy[i] * g.data[c] * (1.0f - t[i] * t[i]);
          if (dx) dx[i] += u * a;
          acc += static_cast<double>(u) * x.data[i];
        }
        row_alpha[r] = acc;
      }
    });
    if (op.needs_grad(1)) {
      double s = 0;
      for (int64_t r = 0; r < N; ++r) s += row_alpha[r];
      op.grad_in(1).data[0] += static_cast<float>(s);
    }
    // Column sums, each over the rows in order.
    float* dg = op.needs_grad(2) ? op.grad_in(2).data : nullptr;
    float* db = op.needs_grad(3) ? op.grad_in(3).data : nullptr;
    ablate::parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double sg = 0, sb = 0;
        for (int64_t r = 0; r < N; ++r) {
          sg += static_cast<double>(dy[r * C + c]) * t[r * C + c];
          sb += dy[r * C + c];
        }
        if (dg) dg[c] += static_cast<float>(sg);
        if (db) db[c] += static_cast<float>(sb);
      }
    });
  }
};

class Dyt final : public ablate::Norm {
 public:
  Dyt(const ablate::Options& o, const ablate::BuildContext& c)
      : fused_(o.get<bool>("fused", true,
                           "one custom op with a hand-written backward; false: built-in ops")) {
    const float alpha0 =
        o.get_in<float>("alpha", 0.5f, 1e-3f, 100.0f, "initial value of the learned scalar alpha");
    if (c.dims.d_model <= 0)
      o.fail("", "d_model must be positive, got " + std::to_string(c.dims.d_model));
    ablate::ParamScope ps = c.params;
    // alpha's value is the plugin's own (role custom: no init variant touches it).
    alpha_ = &ps.add("alpha", 1, 1, ablate::Role::kCustom);
    ablate::fill(alpha_->value, alpha0);
    gamma_ = &ps.add("weight", 1, c.dims.d_model, ablate::Role::kGain);
    beta_ = &ps.add("bias", 1, c.dims.d_model, ablate::Role::kBias);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    ablate::Var a = g.param(*alpha_), gamma = g.param(*gamma_), beta = g.param(*beta_);
    if (fused_) {
      const ablate::Tensor& X = g.value(x);
      return ablate::custom_op<DytOp>(g, {x, a, gamma, beta}, X.rows, X.cols);
    }
    ablate::Var t = ablate::tanh(g, ablate::mul(g, x, a));  // (1,1) alpha broadcast
    return ablate::add(g, ablate::mul(g, t, gamma), beta);  // (1,C) rows broadcast
  }

 private:
  bool fused_;
  ablate::Parameter *alpha_ = nullptr, *gamma_ = nullptr, *beta_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Norm, dyt, Dyt,
              "Dynamic Tanh, gamma * tanh(alpha x) + beta, no statistics (Zhu et al. 2025)")
