// A finite-difference gradient checker for the ops' tests (tests/core/test_ops*.cpp):
// compares an op's hand-written backward with central differences of
// L = sum(op(inputs) * R), R random, with input gradients pre-filled so that a backward
// that assigns instead of accumulating fails too.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ablate/graph.hpp"
#include "ablate/tensor.hpp"
#include "node.hpp"  // private to the core layer: backward_with_seed walks the tape

namespace ablate::test {

// ---- finite-difference gradient checker ----------------------------------------------

struct InputSpec {
  int64_t rows, cols;
  float lo = -1.0f, hi = 1.0f;
  float min_abs = 0.0f;  // keep |x| away from a kink (relu) by resampling
};

// Builds the op under test from the input leaves; called once per evaluation.
using BuildFn = std::function<Var(Graph&, const std::vector<Var>&)>;

struct FdOptions {
  float eps = 1e-2f;
  double atol = 2e-3;  // per element: |analytic - numeric| <= atol + rtol |numeric|
  double rtol = 2e-2;
  double norm_tol = 1e-2;      // and ||analytic - numeric|| <= norm_tol ||numeric||
  int64_t max_per_input = 96;  // elements probed per input (random subset beyond that)
  bool training = false;
};

struct FdResult {
  bool ok = true;
  std::string message;  // the first failure
  double max_err = 0.0;
  double norm_err = 0.0;  // relative
  int64_t checked = 0;
};

// Runs every node's backward from `out` with its gradient seeded by r (instead of the
// ones of Graph::backward), so the loss is the linear functional sum(out * r).
inline void backward_with_seed(Graph& g, Var out, const std::vector<float>& r) {
  REQUIRE(g.requires_grad(out));
  Tensor& go = g.grad(out);
  REQUIRE(static_cast<size_t>(go.numel()) == r.size());
  std::memcpy(go.data, r.data(), sizeof(float) * r.size());
  for (int id = out.id; id >= 0; --id) {
    Node& n = node(g, id);
    if (n.requires_grad && n.backward && n.grad.data) n.backward(g, id);
  }
}

// Compares the analytic gradient of L = sum(op(inputs) * R), R random, with central
// differences. Input gradients are pre-filled with random values first, so a backward
// that assigns instead of accumulating fails too.
inline FdResult check_gradients(const BuildFn& build, const std::vector<InputSpec>& inputs,
                                uint64_t seed = 1, const FdOptions& opt = {}) {
  ParamStore store(seed);
  Rng rng(seed * 7919 + 17);
  std::vector<Parameter*> ps;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const InputSpec& s = inputs[k];
    Parameter& p = store.add("in" + std::to_string(k), s.rows, s.cols, Role::kCustom);
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      float x;
      do x = s.lo + (s.hi - s.lo) * rng.uniform();
      while (std::fabs(x) < s.min_abs);
      p.value.data[i] = x;
    }
    ps.push_back(&p);
  }
  Graph g;
  g.training = opt.training;
  g.seed = 99;
  g.step = 3;
  auto forward = [&]() {
    g.reset();
    std::vector<Var> vs;
    for (Parameter* p : ps) vs.push_back(g.param(*p));
    return build(g, vs);
  };
  Var out = forward();
  const int64_t n_out = g.value(out).numel();
  std::vector<float> r(static_cast<size_t>(n_out));
  for (float& x : r) x = rng.normal();
  auto loss = [&]() {
    Var o = forward();
    const Tensor y = g.value(o);
    double l = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i)
      l += static_cast<double>(y.data[i]) * r[static_cast<size_t>(i)];
    return l;
  };

  std::vector<std::vector<float>> prior;
  for (Parameter* p : ps) {
    std::vector<float> pr(static_cast<size_t>(p->grad.numel()));
    for (float& x : pr) x = rng.normal();
    std::memcpy(p->grad.data, pr.data(), sizeof(float) * pr.size());
    prior.push_back(pr);
  }
  out = forward();
  backward_with_seed(g, out, r);

  FdResult res;
  double diff2 = 0.0, num2 = 0.0;
  for (size_t k = 0; k < ps.size(); ++k) {
    Parameter& p = *ps[k];
    const int64_t n = p.value.numel();
    std::vector<int64_t> idx;
    if (n <= opt.max_per_input) {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < opt.max_per_input; ++i)
        idx.push_back(static_cast<int64_t>(rng.below(static_cast<uint64_t>(n))));
    }
    for (int64_t i : idx) {
      const double analytic =
          static_cast<double>(p.grad.data[i]) - prior[k][static_cast<size_t>(i)];
      float& v = p.value.data[i];
      const float v0 = v;
      const float vp = v0 + opt.eps, vm = v0 - opt.eps;
      v = vp;
      const double lp = loss();
      v = vm;
      const double lm = loss();
      v = v0;
      const double numeric = (lp - lm) / (static_cast<double>(vp) - static_cast<double>(vm));
      const double err = std::fabs(analytic - numeric);
      diff2 += err * err;
      num2 += numeric * numeric;
      res.max_err = std::max(res.max_err, err);
      ++res.checked;
      if (res.ok && err > opt.atol + opt.rtol * std::fabs(numeric)) {
        res.ok = false;
        res.message = "input " + std::to_string(k) + " element " + std::to_string(i) +
                      ": analytic " + std::to_string(analytic) + " vs numeric " +
                      std::to_string(numeric);
      }
    }
  }
  res.norm_err = std::sqrt(diff2) / std::max(std::sqrt(num2), 1e-6);
  if (res.ok && res.norm_err > opt.norm_tol) {
    res.ok = false;
    res.message = "relative norm error " + std::to_string(res.norm_err);
  }
  return res;
}

#define CHECK_GRAD(...)                                                                       \
  do {                                                                                        \
    const FdResult fd_ = check_gradients(__VA_ARGS__);                                        \
    INFO(fd_.message << " (max err " << fd_.max_err << ", norm err " << fd_.norm_err << ")"); \
    CHECK(fd_.ok);                                                                            \
    CHECK(fd_.checked > 0);                                                                   \
  } while (0)

}  // namespace ablate::test
