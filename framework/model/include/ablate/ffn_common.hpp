// Shared bodies of the FFN variants, so that a variant file only names its activation.
// Ungated (Vaswani et al. 2017): act(x W1 + b1) W2 + b2.  Gated (Shazeer 2020, "GLU
// Variants Improve Transformer"): (act(x W) * x V) W2.  x (B*T, C) -> (B*T, C), hidden H.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>

#include "ablate/ffn.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace ablate {

namespace ffn_detail {

inline int64_t channels(const Options& o, const ModelDims& d) {
  if (d.d_model <= 0) o.fail("", "d_model must be positive, got " + std::to_string(d.d_model));
  return d.d_model;
}

inline Var maybe(Graph& g, Parameter* p) { return p ? g.param(*p) : Var{}; }

}  // namespace ffn_detail

// act(x W1 + b1) W2 + b2 with W1 (C, H), W2 (H, C); H = `hidden` or ffn_multiplier * C.
class UngatedFfn : public Ffn {
 public:
  UngatedFfn(const Options& o, const BuildContext& c) {
    int64_t hidden = o.get_in<int64_t>("hidden", 0, 0, int64_t{1} << 24,
                                       "hidden width H; 0 = ffn_multiplier * d_model");
    bool bias =
        o.get<bool>("bias", c.dims.bias, "biases on both linear layers (default: model.bias)");
    int64_t C = ffn_detail::channels(o, c.dims);
    hidden_ = hidden > 0 ? hidden : c.dims.ffn_multiplier * C;
    if (hidden_ <= 0)
      o.fail("hidden", "the hidden width must be positive (ffn_multiplier = " +
                           std::to_string(c.dims.ffn_multiplier) + ")");
    ParamScope ps = c.params;
    w1_ = &ps.add("up.weight", C, hidden_, Role::kHidden);
    if (bias) b1_ = &ps.add("up.bias", 1, hidden_, Role::kBias);
    w2_ = &ps.add("down.weight", hidden_, C, Role::kResidualOut);
    if (bias) b2_ = &ps.add("down.bias", 1, C, Role::kBias);
  }

  Var forward(Graph& g, Var x) override {
    Var h = linear(g, x, g.param(*w1_), ffn_detail::maybe(g, b1_));  // (B*T, H)
    h = activation(g, h);
    return linear(g, h, g.param(*w2_), ffn_detail::maybe(g, b2_));  // (B*T, C)
  }
  int64_t hidden() const { return hidden_; }

 protected:
  virtual Var activation(Graph& g, Var x) const = 0;

 private:
  int64_t hidden_ = 0;
  Parameter *w1_ = nullptr, *b1_ = nullptr, *w2_ = nullptr, *b2_ = nullptr;
};

// (act(x W) * x V) W2 with W, V (C, H) and W2 (H, C). With match_params (the default),
// H = ffn_multiplier * floor(2C/3), so that three matrices hold as many weights as the
// two of an ungated FFN of width ffn_multiplier * C (256 for C = 96: 3*96*256 = 2*96*384).
class GatedFfn : public Ffn {
 public:
  GatedFfn(const Options& o, const BuildContext& c) {
    int64_t hidden = o.get_in<int64_t>("hidden", 0, 0, int64_t{1} << 24,
                                       "hidden width H; 0 = from ffn_multiplier and match_params");
    bool match = o.get<bool>("match_params", true,
                             "H = ffn_multiplier * floor(2 d_model / 3), the parameter count of an "
                             "ungated FFN; false: ffn_multiplier * d_model");
    bool bias =
        o.get<bool>("bias", c.dims.bias, "biases on the three linear layers (default: model.bias)");
    int64_t C = ffn_detail::channels(o, c.dims);
    hidden_ = hidden > 0 ? hidden : c.dims.ffn_multiplier * (match ? 2 * C / 3 : C);
    if (hidden_ <= 0)
      o.fail("hidden", "the hidden width comes out as " + std::to_string(hidden_) +
                           " for d_model " + std::to_string(C) + "; set hidden explicitly");
    ParamScope ps = c.params;
    w_ = &ps.add("gate.weight", C, hidden_, Role::kHidden);
    if (bias) bw_ = &ps.add("gate.bias", 1, hidden_, Role::kBias);
    v_ = &ps.add("up.weight", C, hidden_, Role::kHidden);
    if (bias) bv_ = &ps.add("up.bias", 1, hidden_, Role::kBias);
    w2_ = &ps.add("down.weight", hidden_, C, Role::kResidualOut);
    if (bias) b2_ = &ps.add("down.bias", 1, C, Role::kBias);
  }

  Var forward(Graph& g, Var x) override {
    Var gate = activation(g, linear(g, x, g.param(*w_), ffn_detail::maybe(g, bw_)));  // (B*T, H)
    Var up = linear(g, x, g.param(*v_), ffn_detail::maybe(g, bv_));                   // (B*T, H)
    return linear(g, mul(g, gate, up), g.param(*w2_), ffn_detail::maybe(g, b2_));     // (B*T, C)
  }
  int64_t hidden() const { return hidden_; }

 protected:
  virtual Var activation(Graph& g, Var x) const = 0;

 private:
  int64_t hidden_ = 0;
  Parameter *w_ = nullptr, *bw_ = nullptr, *v_ = nullptr, *bv_ = nullptr, *w2_ = nullptr,
            *b2_ = nullptr;
};

}  // namespace ablate
