// Causal multi-head self-attention (Vaswani et al. 2017; GPT-2's fused c_attn/c_proj).
// x (B*T, C) -> qkv = x Wqkv (C, 3C) -> q, k, v (B*T, NH*HS) -> fused attention with the
// causal mask -> y Wo (C, C) -> (B*T, C). Positional rotation and slopes come from the model.
#include <algorithm>
#include <cmath>
#include <string>

#include "ablate/attention.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class Causal final : public ablate::Attention {
 public:
  Causal(const ablate::Options& o, const ablate::BuildContext& c) {
    // GPT-1 (the Julia seed) has bias-free q, k, v but a biased output projection.
    bool qkv_bias = o.get<bool>("qkv_bias", c.dims.bias, "bias on the fused q, k, v projection (default: model.bias)");
    bool out_bias = o.get<bool>("out_bias", c.dims.bias, "bias on the output projection (default: model.bias)");
    C_ = c.dims.d_model;
    NH_ = c.dims.n_heads;
    if (C_ <= 0 || NH_ <= 0)
      o.fail("", "d_model and n_heads must be positive, got d_model = " + std::to_string(C_) +
                     ", n_heads = " + std::to_string(NH_));
    if (C_ % NH_ != 0)
      o.fail("", "n_heads = " + std::to_string(NH_) + " does not divide d_model = " + std::to_string(C_) +
                     "; choose n_heads among the divisors of d_model");
    HS_ = C_ / NH_;
    // GPT-2 scales the residual projection's init by 1/sqrt(2 * n_layers).
    float out_std = 0.02f / std::sqrt(2.0f * static_cast<float>(std::max<int64_t>(1, c.dims.n_layers)));
    ablate::ParamScope ps = c.params;
    wqkv_ = &ps.add("qkv.weight", C_, 3 * C_, ablate::Init::kNormal, 0.02f);
    if (qkv_bias) bqkv_ = &ps.add("qkv.bias", 1, 3 * C_, ablate::Init::kZeros, 0.0f, false);
    wo_ = &ps.add("proj.weight", C_, C_, ablate::Init::kNormal, out_std);
    if (out_bias) bo_ = &ps.add("proj.bias", 1, C_, ablate::Init::kZeros, 0.0f, false);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::AttentionInput& in) override {
    ablate::Var qkv = ablate::linear(g, x, g.param(*wqkv_), bqkv_ ? g.param(*bqkv_) : ablate::Var{});  // (B*T, 3C)
    ablate::Var q = ablate::slice_cols(g, qkv, 0, C_);                                                  // (B*T, C)
    ablate::Var k = ablate::slice_cols(g, qkv, C_, C_);
    ablate::Var v = ablate::slice_cols(g, qkv, 2 * C_, C_);
    if (in.positional) in.positional->rotate(g, q, k, in.pos, NH_, NH_, HS_);
    ablate::AttentionSpec spec;
    spec.batch = in.pos.batch;
    spec.time = in.pos.time;
    spec.n_heads = NH_;
    spec.n_kv_heads = NH_;
    spec.head_size = HS_;
    spec.causal = true;
    spec.slopes = in.positional ? in.positional->attention_slopes() : nullptr;
    spec.key_mask = in.key_mask;
    spec.weights_out = in.weights_out;
    spec.cache = in.cache;
    ablate::Var y = ablate::attention(g, q, k, v, spec);                                                // (B*T, C)
    return ablate::linear(g, y, g.param(*wo_), bo_ ? g.param(*bo_) : ablate::Var{});
  }

  int64_t kv_width() const override { return C_; }
  int64_t n_heads() const override { return NH_; }

 private:
  int64_t C_ = 0, NH_ = 0, HS_ = 0;
  ablate::Parameter* wqkv_ = nullptr;
  ablate::Parameter* bqkv_ = nullptr;
  ablate::Parameter* wo_ = nullptr;
  ablate::Parameter* bo_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Attention, causal, Causal, "causal multi-head self-attention, fused qkv projection (GPT-2)")
