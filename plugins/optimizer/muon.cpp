// Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers in neural networks";
// the reference is github.com/KellerJordan/Muon): SGD momentum (Nesterov by default) whose
// update of each hidden matrix is replaced by the nearest semi-orthogonal matrix, found by
// five steps of a quintic Newton-Schulz iteration X <- a X + (b A + c A^2) X with A = X X^T
// and (a, b, c) = (3.4445, -4.7750, 2.0315), then scaled by sqrt(max(1, fan_out / fan_in)).
// Muon applies to matrices of role hidden or residual_out; every other parameter
// (embeddings, positions, the LM head, gains, biases, custom ones) gets AdamW with its own
// learning rate, which the scheduler scales like Muon's. Roles come from the parameters
// (tensor.hpp), never from their names.
// `iteration: polar_express` (Amsel et al. 2025, "The Polar Express"; modded-nanogpt and
// nanochat use it) takes per-iteration coefficients, optimal for each of the five steps,
// instead of the same (a, b, c) at every step, on G / (1.02 |G|_F) (its safety margin).
// ablate stores a weight (in, out), the transpose of torch's (out, in): torch's
// max(1, rows / cols) is max(1, cols / rows) here. The iteration runs in float32 (the
// reference uses bfloat16).
// State: "momentum.<name>" for Muon's matrices, "m.<name>" and "v.<name>" for the rest.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/plugin.hpp"

namespace {

bool orthogonalised(const ablate::Parameter& p) {
  return (p.role == ablate::Role::kHidden || p.role == ablate::Role::kResidualOut) &&
         p.value.rows > 1 && p.value.cols > 1;
}

class Muon final : public ablate::Optimizer {
 public:
  Muon(const ablate::Options& o, const ablate::BuildContext&)
      : lr_(o.get_in<float>("lr", 0.02f, 1e-12f, 10.0f,
                            "learning rate of the orthogonalised (hidden) matrices")),
        momentum_(o.get_in<float>("momentum", 0.95f, 0.0f, 0.9999f,
                                  "momentum of the hidden matrices' updates")),
        nesterov_(o.get<bool>("nesterov", true, "Nesterov momentum (the reference's default)")),
        ns_steps_(o.get_in<int64_t>("ns_steps", 5, 1, 100, "Newton-Schulz iterations")),
        polar_(o.get_choice("iteration", "newton_schulz", {"newton_schulz", "polar_express"},
                            "newton_schulz: Muon's fixed quintic (a, b, c) at every step; "
                            "polar_express: Polar Express's coefficients per step (at most 5)") ==
               "polar_express"),
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 10.0f,
                            "decoupled weight decay, on roles that decay (tensor.hpp)")),
        adam_lr_(o.get_in<float>("adam_lr", 3e-4f, 1e-12f, 10.0f,
                                 "AdamW's learning rate for every other parameter")),
        adam_eps_(o.get_in<float>("adam_eps", 1e-10f, 1e-30f, 1.0f, "AdamW's eps")) {
    std::tie(b1_, b2_) = ablate::read_betas(o, "adam_betas", {0.9f, 0.95f},
                                            "AdamW's [beta1, beta2], each in [0, 1)");
    if (polar_ && ns_steps_ > kPolarSteps)
      o.fail("ns_steps", "Polar Express has coefficients for at most " +
                             std::to_string(kPolarSteps) + " iterations, got " +
                             std::to_string(ns_steps_) + "; set ns_steps: 5 or fewer");
  }

  void init(const std::vector<ablate::Parameter*>& params) override {
    names_.clear(), muon_.clear(), buf_.clear(), m_.clear(), v_.clear();
    for (const ablate::Parameter* p : params) {
      const size_t n = static_cast<size_t>(p->value.numel());
      names_.push_back(p->name);
      muon_.push_back(orthogonalised(*p));
      buf_.emplace_back(muon_.back() ? n : 0, 0.0f);
      m_.emplace_back(muon_.back() ? 0 : n, 0.0f);
      v_.emplace_back(muon_.back() ? 0 : n, 0.0f);
    }
  }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t step) override {
    check(params, step);
    const float ratio = lr / lr_;  // the scheduler's factor, applied to AdamW's rate too
    for (size_t i = 0; i < params.size(); ++i) {
      if (muon_[i]) muon_step(*params[i], buf_[i].data(), lr);
      else adamw_step(*params[i], m_[i].data(), v_[i].data(), adam_lr_ * ratio, step);
    }
  }

  float base_lr() const override { return lr_; }

  std::vector<ablate::StateBuffer> state() override {
    std::vector<ablate::StateBuffer> s;
    for (size_t i = 0; i < names_.size(); ++i)
      if (muon_[i]) s.push_back({"momentum." + names_[i], &buf_[i]});
    for (size_t i = 0; i < names_.size(); ++i)
      if (!muon_[i]) s.push_back({"m." + names_[i], &m_[i]});
    for (size_t i = 0; i < names_.size(); ++i)
      if (!muon_[i]) s.push_back({"v." + names_[i], &v_[i]});
    return s;
  }

 private:
  void muon_step(ablate::Parameter& p, float* buf, float lr) {
    const int64_t n = p.value.numel();
    const float* g = p.grad.data;
    u_.resize(static_cast<size_t>(n));
    float* u = u_.data();
    const float mu = momentum_;
    const bool nesterov = nesterov_;
    ablate::parallel_for(n, int64_t{1} << 14, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        buf[j] = mu * buf[j] + (1.0f - mu) * g[j];
        u[j] = nesterov ? (1.0f - mu) * g[j] + mu * buf[j] : buf[j];
      }
    });
    const ablate::Tensor x = newton_schulz(ablate::Tensor{u, p.value.rows, p.value.cols});
    const float scale = lr * std::sqrt(std::max(1.0f, static_cast<float>(p.value.cols) /
                                                          static_cast<float>(p.value.rows)));
    const float decay = p.weight_decay() ? 1.0f - lr * wd_ : 1.0f;
    float* w = p.value.data;
    ablate::parallel_for(n, int64_t{1} << 14, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) w[j] = w[j] * decay - scale * x.data[j];
    });
  }

  // The quintic iteration on G / |G|_F. For a wide X (rows <= cols) A = X X^T and
  // X <- a X + B X; for a tall one the same on X^T, written as A = X^T X, X <- a X + X B
  // (B is symmetric), so nothing is transposed in memory. Returns a view of x_.
  ablate::Tensor newton_schulz(const ablate::Tensor& g) {
    const int64_t r = g.rows, k = g.cols, s = std::min(r, k);
    const bool wide = r <= k;
    double norm = 0;
    for (int64_t j = 0; j < g.numel(); ++j) norm += static_cast<double>(g.data[j]) * g.data[j];
    const float inv =
        1.0f / (static_cast<float>(std::sqrt(norm)) * (polar_ ? 1.02f : 1.0f) + 1e-7f);
    x_.resize(static_cast<size_t>(g.numel()));
    y_.resize(x_.size());
    a_.resize(static_cast<size_t>(s * s));
    b_.resize(a_.size());
    ablate::Tensor X{x_.data(), r, k}, Y{y_.data(), r, k}, A{a_.data(), s, s}, B{b_.data(), s, s};
    for (int64_t j = 0; j < g.numel(); ++j) X.data[j] = g.data[j] * inv;
    for (int64_t it = 0; it < ns_steps_; ++it) {
      const float* abc = polar_ ? kPolar[it] : kMuon;
      const float a = abc[0], b = abc[1], c = abc[2];
      ablate::gemm(X, !wide, X, wide, A);      // A = X X^T (wide) or X^T X (tall)
      ablate::gemm(A, false, A, false, B, c);  // B = c A A
      for (int64_t j = 0; j < A.numel(); ++j) B.data[j] += b * A.data[j];
      if (wide) ablate::gemm(B, false, X, false, Y);  // Y = B X
      else ablate::gemm(X, false, B, false, Y);       // Y = X B
      for (int64_t j = 0; j < X.numel(); ++j) X.data[j] = a * X.data[j] + Y.data[j];
    }
    return X;
  }

  void adamw_step(ablate::Parameter& p, float* m, float* v, float lr, int64_t step) const {
    const float step_size = static_cast<float>(
        lr / (1.0 - std::pow(static_cast<double>(b1_), static_cast<double>(step))));
    const float inv_sqrt_bc2 = static_cast<float>(
        1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(b2_), static_cast<double>(step))));
    const float decay = p.weight_decay() ? 1.0f - lr * wd_ : 1.0f;
    float* w = p.value.data;
    const float* g = p.grad.data;
    const float b1 = b1_, b2 = b2_, eps = adam_eps_;
    ablate::parallel_for(p.value.numel(), int64_t{1} << 14, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        w[j] *= decay;
        m[j] = b1 * m[j] + (1.0f - b1) * g[j];
        v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
        w[j] -= step_size * m[j] / (std::sqrt(v[j]) * inv_sqrt_bc2 + eps);
      }
    });
  }

  void check(const std::vector<ablate::Parameter*>& params, int64_t step) const {
    if (step < 1) throw ablate::Error("muon: step counts from 1, got " + std::to_string(step));
    if (params.size() != names_.size())
      throw ablate::Error("muon: step() got " + std::to_string(params.size()) +
                          " parameters but init() got " + std::to_string(names_.size()) +
                          "; call init() with the same parameters");
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i]->name != names_[i] || orthogonalised(*params[i]) != muon_[i] ||
          static_cast<size_t>(params[i]->value.numel()) !=
              (muon_[i] ? buf_[i].size() : m_[i].size()))
        throw ablate::Error("muon: parameter '" + params[i]->name + "' changed since init()");
  }

  static constexpr float kMuon[3] = {3.4445f, -4.7750f, 2.0315f};
  static constexpr int64_t kPolarSteps = 5;
  static constexpr float kPolar[kPolarSteps][3] = {
      {8.156554524902461f, -22.48329292557795f, 15.878769915207462f},
      {4.042929935166739f, -2.808917465908714f, 0.5000178451051316f},
      {3.8916678022926607f, -2.772484153217685f, 0.5060648178503393f},
      {3.285753657755655f, -2.3681294933425376f, 0.46449024233003106f},
      {2.3465413258596377f, -1.7097828382687081f, 0.42323551169305323f}};

  float lr_, momentum_;
  bool nesterov_;
  int64_t ns_steps_;
  bool polar_;
  float wd_, adam_lr_, adam_eps_, b1_ = 0.9f, b2_ = 0.95f;
  std::vector<std::string> names_;
  std::vector<bool> muon_;
  std::vector<std::vector<float>> buf_, m_, v_;
  ablate::AlignedFloats u_, x_, y_, a_, b_;  // scratch of the current matrix
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, muon, Muon,
              "Muon: Newton-Schulz orthogonalised momentum for hidden matrices, AdamW for the rest")
