// Family "qk_transform": a transform of attention's queries, keys and values, head by head,
// between the projection and the attention (before a positional rotation such as RoPE):
// QK-norm and the like. The shipped multi-head attention (attention_common.hpp) applies the
// one its options name (model.attention.qk_transform, default none); the fused attention op,
// grouped-query heads and KV-cache decoding work as without it (the cache holds transformed
// keys and values).
#pragma once
#include <cstdint>

#include "ablate/batch.hpp"
#include "ablate/graph.hpp"

namespace ablate {

// The layout of what a transform gets: head h of a row in columns [h*HS, (h+1)*HS).
struct QkvHeads {
  int64_t n_heads = 1;     // NH: q has NH*HS columns
  int64_t n_kv_heads = 1;  // NKV (divides NH): k and v have NKV*HS columns
  int64_t head_size = 1;   // HS
  Batch batch;             // B, T (rows = B*T), pos0, ids, prompts (batch.hpp)
};

class QkTransform {
 public:
  static constexpr const char* kFamily = "qk_transform";
  virtual ~QkTransform() = default;
  // False if apply() changes nothing: attention then reads q, k and v in place in its fused
  // projection, as with no transform.
  virtual bool transforms() const = 0;
  // q (B*T, NH*HS), k and v (B*T, NKV*HS): replaced by their transforms, of the same shapes.
  // Each head of each row on its own: decoding with a KV cache transforms one position at a
  // time. The constructor's BuildContext has the model's sizes
  // (head size = d_model / n_heads) and the attention's parameter scope.
  virtual void apply(Graph& g, Var& q, Var& k, Var& v, const QkvHeads& h) = 0;
};

}  // namespace ablate
