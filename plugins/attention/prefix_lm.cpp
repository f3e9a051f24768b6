// Prefix-LM multi-head self-attention (Raffel et al. 2020, T5's "prefix LM"; Dong et al.
// 2019, UniLM): a sequence's prompt reads itself whole, everything after it is causal.
// Query i of row b sees key j iff j <= i or j < prefix[b]. The framework sets the prefix
// to the positions no loss scores (training: up to the first scored target, see
// scored_prefix in model.hpp; generation: the prompt), so no scored position sees its
// target and next_token accepts it. With `score_after: "="` an arithmetic problem's
// digits see the decimal point after them. x (B*T, C) -> (B*T, C); see attention_common.hpp.
#include "ablate/attention_common.hpp"

namespace {

class PrefixLm final : public ablate::MultiHeadAttention {
 public:
  PrefixLm(const ablate::Options& o, const ablate::BuildContext& c)
      : MultiHeadAttention(o, c, /*causal=*/true, /*prefix=*/true) {}
};

}  // namespace
ABLATE_PLUGIN(ablate::Attention, prefix_lm, PrefixLm,
              "prefix-LM multi-head self-attention: the unscored prompt sees itself whole, the "
              "rest is causal (T5, UniLM)")
