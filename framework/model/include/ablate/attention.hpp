// Family "attention": the token-mixing sublayer, projections included.
#pragma once
#include <cstdint>

#include "ablate/graph.hpp"
#include "ablate/ops.hpp"
#include "ablate/positional.hpp"

namespace ablate {

struct AttentionInput {
  PosContext pos;  // B, T, pos0
  PositionalEncoding* positional = nullptr;
  KVCache* cache = nullptr;           // incremental decoding (forward only)
  const uint8_t* key_mask = nullptr;  // (B*T) 1 = real token, 0 = padding
  const int32_t* prefix = nullptr;    // (B) or null: ForwardArgs::prefix (a prefix LM's prompts)
  float* weights_out = nullptr;       // (B, NH, T, Tk) attention probabilities
};

class Attention {
 public:
  static constexpr const char* kFamily = "attention";
  virtual ~Attention() = default;
  // x (B*T, C) -> (B*T, C).
  virtual Var forward(Graph& g, Var x, const AttentionInput& in) = 0;
  // Width of one cached key (or value) row: NKV*HS. Used to size KV caches.
  virtual int64_t kv_width() const = 0;
  virtual int64_t n_heads() const = 0;
  // True if no scored position sees a later one: a decoder's mask, or a prefix LM's, whose
  // prompt reads itself whole but is never scored (ForwardArgs::prefix). Objectives check
  // it: a next-token objective refuses attention that sees the token it predicts.
  virtual bool causal() const = 0;
};

}  // namespace ablate
