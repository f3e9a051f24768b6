// conformance::check_gradients (see ablate/conformance.hpp): the gradient of a random
// projection of a forward's outputs (and its auxiliary terms), by the backward pass and by
// central finite differences, on a few elements of each tensor.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ablate/conformance.hpp"
#include "ablate/custom_op.hpp"
#include "ablate/ops.hpp"

namespace ablate::conformance {
namespace {

// The names of the custom ops and auxiliary terms in g, each once, in the order they occur.
void name_custom_ops_and_aux_terms(Graph& g, GradCheckResult& res) {
  for (int id = 0; id < static_cast<int>(g.num_nodes()); ++id) {
    const std::string op = g.node(id).op;
    if (is_custom_op(op) &&
        std::find(res.custom_ops.begin(), res.custom_ops.end(), op) == res.custom_ops.end())
      res.custom_ops.push_back(op);
  }
  for (const AuxTerm& t : g.aux())
    if (std::find(res.aux_terms.begin(), res.aux_terms.end(), t.name) == res.aux_terms.end())
      res.aux_terms.push_back(t.name);
}

// The scalar whose gradient is checked: sum over outputs k of <R_k, y_k>, R_k random (seed
// 1000 + k), when `outputs`; plus every auxiliary term at weight 1, whatever weight the
// plugin trains it at: a wrong gradient of a term weighted 0.01 in training is as wrong.
struct Probe {
  const ForwardFn& forward;
  bool outputs;
  std::vector<std::vector<float>> R;

  // The loss on g's forward `ys` (invalid when there is nothing to check); draws R.
  Var loss(Graph& g, const Outputs& ys) {
    Var loss;
    for (size_t k = 0; k < ys.size(); ++k) {
      const Tensor& t = g.value(ys[k]);
      R.push_back(randn(static_cast<size_t>(t.numel()), 1000 + k));
      if (!outputs) continue;
      Var r = g.constant(R.back().data(), t.rows, t.cols);
      Var s = sum(g, mul(g, ys[k], r));
      loss = loss.valid() ? add(g, loss, s) : s;
    }
    for (const AuxTerm& t : g.aux()) loss = loss.valid() ? add(g, loss, t.value) : t.value;
    return loss;
  }

  // The loss's value from a fresh forward without gradients, in double precision.
  double value(Graph& g) const {
    g.reset();
    NoGrad ng(g);
    Outputs out = forward(g);
    double L = 0;
    for (size_t k = 0; k < out.size() && outputs; ++k) {
      const Tensor& t = g.value(out[k]);
      for (int64_t i = 0; i < t.numel(); ++i)
        L += static_cast<double>(R[k][static_cast<size_t>(i)]) * t.data[i];
    }
    for (const AuxTerm& t : g.aux()) L += g.value(t.value).data[0];
    return L;
  }
};

// The gradients of `loss` with respect to each of `wrt`, by the backward pass.
std::vector<std::vector<float>> backward_gradients(Graph& g, Var loss,
                                                   const std::vector<Parameter*>& wrt) {
  for (Parameter* p : wrt)
    std::memset(p->grad.data, 0, sizeof(float) * static_cast<size_t>(p->grad.numel()));
  g.backward(loss);
  std::vector<std::vector<float>> analytic;
  for (Parameter* p : wrt) analytic.emplace_back(p->grad.data, p->grad.data + p->grad.numel());
  return analytic;
}

// Distinct elements of a tensor of n: the first per_tensor of a shuffle drawn from `pick`.
std::vector<int64_t> pick_elements(int64_t n, int per_tensor, Rng& pick) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  const int64_t m = std::min<int64_t>(n, per_tensor);
  for (int64_t i = 0; i < m; ++i)
    std::swap(idx[static_cast<size_t>(i)],
              idx[static_cast<size_t>(
                  i + static_cast<int64_t>(pick.below(static_cast<uint64_t>(n - i))))]);
  idx.resize(static_cast<size_t>(m));
  return idx;
}

// Compares analytic gradients with central differences of the probe loss, element by
// element; an element where the forward and backward differences disagree sits on a kink
// and is skipped.
class FiniteDifferences {
 public:
  FiniteDifferences(Graph& g, const Probe& probe, double h, double rtol, double atol,
                    GradCheckResult& res)
      : g_(g), probe_(probe), h_(h), rtol_(rtol), atol_(atol), res_(res), L0_(probe.value(g)) {}

  // Element i of p, whose analytic gradient is a; `scale` is the largest gradient of p (at
  // least 1), which atol is relative to.
  void compare(Parameter& p, int64_t i, double a, double scale) {
    float& v = p.value.data[i];
    const float saved = v;
    v = static_cast<float>(saved + h_);
    const double hp = static_cast<double>(v) - saved;
    const double Lp = probe_.value(g_);
    v = static_cast<float>(saved - h_);
    const double hm = saved - static_cast<double>(v);
    const double Lm = probe_.value(g_);
    v = saved;
    const double fwd = (Lp - L0_) / hp, bwd = (L0_ - Lm) / hm, central = (Lp - Lm) / (hp + hm);
    const double tol = atol_ * scale + rtol_ * std::max(std::fabs(a), std::fabs(central));
    if (std::fabs(fwd - bwd) > tol + 0.05 * std::max(std::fabs(fwd), std::fabs(bwd))) {
      ++res_.skipped;
      return;
    }
    ++res_.checked;
    if (std::fabs(a - central) > tol) {
      ++res_.failed;
      res_.report += p.name + "[" + std::to_string(i) + "]: analytic " + std::to_string(a) +
                     ", numeric " + std::to_string(central) + "\n";
    }
  }

 private:
  Graph& g_;
  const Probe& probe_;
  const double h_, rtol_, atol_;
  GradCheckResult& res_;
  const double L0_;
};

}  // namespace

GradCheckResult check_gradients(const ForwardFn& forward, const std::vector<Parameter*>& wrt,
                                int per_tensor, double h, double rtol, double atol, GradLoss what) {
  GradCheckResult res;
  Graph g;
  Probe probe{forward, what == GradLoss::kOutputsAndAux, {}};
  const Outputs ys = forward(g);
  name_custom_ops_and_aux_terms(g, res);
  const Var loss = probe.loss(g, ys);
  if (!loss.valid()) return res;  // nothing to check (aux_only without terms)
  const std::vector<std::vector<float>> analytic = backward_gradients(g, loss, wrt);
  // The same step again follows the plan of values' lifetimes the first one made (ablate/
  // graph.hpp): a plugin that keeps a Tensor past the value's last recorded read sees other
  // numbers there, and one whose nodes depend on the data without saying so reads a value
  // given back (an Error).
  g.reset();
  probe.R.clear();
  if (backward_gradients(g, probe.loss(g, forward(g)), wrt) != analytic) {
    ++res.failed;
    res.report +=
        "the gradients differ when the step runs again, following the plan of values' lifetimes "
        "its first run made: read values through Graph::value() where they are used (see "
        "\"Values' lifetimes\" in ablate/graph.hpp)\n";
  }
  FiniteDifferences fd(g, probe, h, rtol, atol, res);
  Rng pick(99);
  for (size_t pi = 0; pi < wrt.size(); ++pi) {
    double scale = 0;
    for (float a : analytic[pi]) scale = std::max(scale, static_cast<double>(std::fabs(a)));
    scale = std::max(scale, 1.0);
    for (int64_t i : pick_elements(wrt[pi]->value.numel(), per_tensor, pick))
      fd.compare(*wrt[pi], i, analytic[pi][static_cast<size_t>(i)], scale);
  }
  return res;
}

}  // namespace ablate::conformance
