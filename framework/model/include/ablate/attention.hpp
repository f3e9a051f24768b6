// Family "attention": the token-mixing sublayer, projections included.
#pragma once
#include <cstdint>

#include "ablate/batch.hpp"
#include "ablate/graph.hpp"
#include "ablate/ops.hpp"
#include "ablate/positional.hpp"

namespace ablate {

class Attention {
 public:
  static constexpr const char* kFamily = "attention";
  virtual ~Attention() = default;
  // x (B*T, C) -> (B*T, C). `in` (batch.hpp) gives B, T and pos0, the model's positional
  // encoding, this layer's KV cache (incremental decoding, forward only: in.cache()), the
  // padding mask, the prompts (Batch::prefix) and this layer's attention-weights buffer
  // (in.weights_out()).
  virtual Var forward(Graph& g, Var x, const Batch& in) = 0;
  // Width of one cached key (or value) row: NKV*HS. Used to size KV caches.
  virtual int64_t kv_width() const = 0;
  virtual int64_t n_heads() const = 0;
  // True if no scored position sees a later one: a decoder's mask, or a prefix LM's, whose
  // prompt reads itself whole but is never scored (Batch::prefix). Objectives check
  // it: a next-token objective refuses attention that sees the token it predicts.
  virtual bool causal() const = 0;
};

// The fused attention op's arguments (ops.hpp) for a batch at its layer: B, T, the heads,
// the mask (causal; with prefix_lm also the batch's prompts), the positional encoding's
// slopes, the padding mask, this layer's KV cache and attention-weights buffer. q, k and v
// start at column 0 of their nodes (set q_col, k_col, v_col to read a fused projection).
inline AttentionSpec attention_spec(const Batch& in, int64_t n_heads, int64_t n_kv_heads,
                                    int64_t head_size, bool causal, bool prefix_lm = false) {
  AttentionSpec spec;
  spec.batch = in.batch;
  spec.time = in.time;
  spec.n_heads = n_heads;
  spec.n_kv_heads = n_kv_heads;
  spec.head_size = head_size;
  spec.causal = causal;
  spec.slopes = in.positional ? in.positional->attention_slopes() : nullptr;
  spec.key_mask = in.key_mask;
  spec.prefix = causal && prefix_lm ? in.prefix : nullptr;
  spec.weights_out = in.weights_out();
  spec.cache = in.cache();
  return spec;
}

}  // namespace ablate
