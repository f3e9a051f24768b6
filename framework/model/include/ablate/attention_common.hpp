// The shared body of the multi-head self-attention variants, so that a variant file only
// names its mask. Multi-head attention (Vaswani et al. 2017) with GPT-2's fused projection,
// grouped-query heads (Ainslie et al. 2023; n_kv_heads = 1 is multi-query, Shazeer 2019):
// x (B*T, C) -> [q k v] = x Wqkv, Wqkv (C, C + 2*NKV*HS) -> q (B*T, NH*HS), k v (B*T, NKV*HS)
// -> the options' q/k/v transform per head (qk_transform family, e.g. QK-norm; default none)
// -> the positional rotation (RoPE) -> fused attention (causal, prefix-LM or bidirectional
// mask, key padding mask) -> y Wo (C, C).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "ablate/attention.hpp"
#include "ablate/family.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/qk_transform.hpp"
#include "ablate/registry.hpp"

namespace ablate {

class MultiHeadAttention : public Attention {
 public:
  // causal: a decoder's mask; with prefix, also a prefix LM's (Batch::prefix).
  MultiHeadAttention(const Options& o, const BuildContext& c, bool causal, bool prefix = false)
      : causal_(causal), prefix_(causal && prefix) {
    // GPT-1 (the Julia seed) has bias-free q, k, v but a biased output projection.
    bool qkv_bias = o.get<bool>("qkv_bias", c.dims.bias,
                                "bias on the fused q, k, v projection (default: model.bias)");
    bool out_bias =
        o.get<bool>("out_bias", c.dims.bias, "bias on the output projection (default: model.bias)");
    C_ = c.dims.d_model;
    NH_ = c.dims.n_heads;
    if (C_ <= 0 || NH_ <= 0)
      o.fail("", "d_model and n_heads must be positive, got d_model = " + std::to_string(C_) +
                     ", n_heads = " + std::to_string(NH_));
    if (C_ % NH_ != 0)
      o.fail("", "n_heads = " + std::to_string(NH_) + " does not divide d_model = " +
                     std::to_string(C_) + "; choose n_heads among the divisors of d_model");
    NKV_ = o.get_in<int64_t>("n_kv_heads", 0, 0, 4096,
                             "key/value heads shared by groups of query heads; 0 = n_heads (plain "
                             "multi-head), 1 = multi-query");
    if (NKV_ == 0) NKV_ = NH_;
    if (NH_ % NKV_ != 0)
      o.fail("n_kv_heads",
             std::to_string(NKV_) + " does not divide n_heads = " + std::to_string(NH_) +
                 "; choose a divisor of n_heads (1 = multi-query, n_heads = multi-head)");
    HS_ = C_ / NH_;
    const int64_t kv = NKV_ * HS_;
    ParamScope ps = c.params;
    wqkv_ = &ps.add("qkv.weight", C_, C_ + 2 * kv, Role::kHidden);
    if (qkv_bias) bqkv_ = &ps.add("qkv.bias", 1, C_ + 2 * kv, Role::kBias);
    wo_ = &ps.add("proj.weight", C_, C_, Role::kResidualOut);
    if (out_bias) bo_ = &ps.add("proj.bias", 1, C_, Role::kBias);
    // The q/k/v transform (model.attention.qk_transform), its parameters after the
    // attention's, under "qk_transform.". Read last: describing stops at a nested variant.
    const std::string help =
        "transform of q, k and v per head after the projection (family qk_transform: ablate "
        "plugins qk_transform)";
    if (o.describing()) {
      o.get<std::string>(QkTransform::kFamily, family(QkTransform::kFamily).default_variant, help);
    } else {
      BuildContext tc = c;
      tc.params = ParamScope(c.params.store(), c.params.prefix() + "qk_transform.");
      tc.parts = nullptr;
      qk_ = PluginRegistry::instance().create<QkTransform>(family_options(o, QkTransform::kFamily),
                                                           tc);
    }
  }

  Var forward(Graph& g, Var x, const Batch& in) override {
    const int64_t kv = NKV_ * HS_;
    AttentionSpec spec = attention_spec(in, NH_, NKV_, HS_, causal_, prefix_);
    Var qkv =
        linear(g, x, g.param(*wqkv_), bqkv_ ? g.param(*bqkv_) : Var{});  // (B*T, C + 2*NKV*HS)
    Var q = qkv, k = qkv, v = qkv;  // column ranges of the fused projection, unless changed
    const bool transform = qk_ && qk_->transforms();
    const bool rotate = in.positional && in.positional->rotates();
    if (transform || rotate) {
      q = slice_cols(g, qkv, 0, C_);   // (B*T, NH*HS)
      k = slice_cols(g, qkv, C_, kv);  // (B*T, NKV*HS)
      v = slice_cols(g, qkv, C_ + kv, kv);
      if (transform) qk_->apply(g, q, k, v, QkvHeads{NH_, NKV_, HS_, in});
      if (rotate) in.positional->rotate(g, q, k, in, NH_, NKV_, HS_);
    } else {
      spec.k_col = C_;
      spec.v_col = C_ + kv;
    }
    Var y = attention(g, q, k, v, spec);  // (B*T, C)
    return linear(g, y, g.param(*wo_), bo_ ? g.param(*bo_) : Var{});
  }

  int64_t kv_width() const override { return NKV_ * HS_; }
  int64_t n_heads() const override { return NH_; }
  bool causal() const override { return causal_; }
  int64_t n_kv_heads() const { return NKV_; }

 private:
  bool causal_, prefix_;
  int64_t C_ = 0, NH_ = 0, NKV_ = 0, HS_ = 0;
  Parameter* wqkv_ = nullptr;
  Parameter* bqkv_ = nullptr;
  Parameter* wo_ = nullptr;
  Parameter* bo_ = nullptr;
  std::unique_ptr<QkTransform> qk_;  // null only in describe mode
};

}  // namespace ablate
