// Bidirectional multi-head self-attention: the encoder's (BERT-like) mask, every query sees
// every real key; only the mask differs from `causal` (REFERENCE.md item 6). Use with key
// padding masks for batches of variable-length sequences. A next-token LM trained with it
// sees its targets; it is meant for encoders. With a KV cache (generation) a query sees
// the cached keys, i.e. the past. x (B*T, C) -> (B*T, C); see attention_common.hpp.
#include "ablate/attention_common.hpp"

namespace {

class Bidirectional final : public ablate::MultiHeadAttention {
 public:
  Bidirectional(const ablate::Options& o, const ablate::BuildContext& c)
      : MultiHeadAttention(o, c, /*causal=*/false) {}
};

}  // namespace
ABLATE_PLUGIN(ablate::Attention, bidirectional, Bidirectional,
              "bidirectional (encoder) multi-head self-attention, grouped-query option")
