// my_attention: an attention variant for ablate (family "attention"), from
// `ablate plugin new attention my_attention`. As generated: multi-head self-attention with separate
// q, k, v projections and the fused attention op (ablate/ops.hpp), which handles the causal
// mask, padding masks, ALiBi-style slopes, KV caches and attention weights.
// x (B*T, C) -> q, k, v (B*T, NH*HS) -> attention -> y Wo -> (B*T, C).
#include <string>

#include "ablate/attention.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class MyAttention final : public ablate::Attention {
 public:
  MyAttention(const ablate::Options& o, const ablate::BuildContext& c)
      : causal_(o.get<bool>("causal", true, "causal mask (decoder); false: every token sees every token (encoder)")) {
    C_ = c.dims.d_model;
    NH_ = c.dims.n_heads;
    if (C_ <= 0 || NH_ <= 0 || C_ % NH_ != 0)
      o.fail("", "needs n_heads dividing d_model, got d_model = " + std::to_string(C_) + ", n_heads = " + std::to_string(NH_));
    HS_ = C_ / NH_;
    ablate::ParamScope ps = c.params;
    wq_ = &ps.add("q.weight", C_, C_, ablate::Role::kHidden);
    wk_ = &ps.add("k.weight", C_, C_, ablate::Role::kHidden);
    wv_ = &ps.add("v.weight", C_, C_, ablate::Role::kHidden);
    wo_ = &ps.add("proj.weight", C_, C_, ablate::Role::kResidualOut);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    ablate::Var q = ablate::linear(g, x, g.param(*wq_));  // (B*T, NH*HS)
    ablate::Var k = ablate::linear(g, x, g.param(*wk_));
    ablate::Var v = ablate::linear(g, x, g.param(*wv_));
    if (in.positional) in.positional->rotate(g, q, k, in, NH_, NH_, HS_);  // RoPE and friends
    // B, T, mask, ALiBi slopes, padding mask, this layer's KV cache and attention weights.
    ablate::AttentionSpec spec = ablate::attention_spec(in, NH_, NH_, HS_, causal_);
    ablate::Var y = ablate::attention(g, q, k, v, spec);  // (B*T, C)
    return ablate::linear(g, y, g.param(*wo_));
  }

  int64_t kv_width() const override { return C_; }  // one cached key row: NKV*HS
  int64_t n_heads() const override { return NH_; }
  bool causal() const override { return causal_; }

 private:
  bool causal_;
  int64_t C_ = 0, NH_ = 0, HS_ = 0;
  ablate::Parameter *wq_ = nullptr, *wk_ = nullptr, *wv_ = nullptr, *wo_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Attention, my_attention, MyAttention, "multi-head self-attention with separate q, k, v projections")
