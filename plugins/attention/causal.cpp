// Causal multi-head self-attention (Vaswani et al. 2017; GPT-2's fused c_attn/c_proj): the
// decoder's mask, query i sees keys j <= i. Grouped-query heads with `n_kv_heads`.
// x (B*T, C) -> (B*T, C); see attention_common.hpp for the shapes.
#include "ablate/attention_common.hpp"

namespace {

class Causal final : public ablate::MultiHeadAttention {
 public:
  Causal(const ablate::Options& o, const ablate::BuildContext& c)
      : MultiHeadAttention(o, c, /*causal=*/true) {}
};

}  // namespace
ABLATE_PLUGIN(
    ablate::Attention, causal, Causal,
    "causal multi-head self-attention, fused qkv projection, grouped-query option (GPT-2)")
