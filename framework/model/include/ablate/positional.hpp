// Family "positional": position information acts at three points: added to the token
// embeddings, rotating queries and keys, or biasing attention logits. Each hook
// defaults to nothing; a variant overrides the ones it uses.
#pragma once
#include <cstdint>

#include "ablate/graph.hpp"

namespace ablate {

struct PosContext {
  int64_t batch = 1, time = 1;  // B, T of the current input
  int64_t pos0 = 0;             // absolute position of its first token (KV-cache decoding)
  // (B*T) token ids of the input, or null (a probe without tokens, e.g. ablate inspect).
  const int32_t* ids = nullptr;
  // (B) or null: row b's positions before prefix[b] (absolute, as pos0) are its prompt,
  // which no loss scores and generation is given whole (ForwardArgs::prefix). Only there
  // may a position's encoding read later ids; null: no prompt, everything causal.
  const int32_t* prefix = nullptr;
};

class PositionalEncoding {
 public:
  static constexpr const char* kFamily = "positional";
  virtual ~PositionalEncoding() = default;
  // x (B*T, C) -> x with positions added.
  virtual Var embed(Graph& g, Var x, const PosContext& pc) { return x; }
  // q (B*T, NH*HS), k (B*T, NKV*HS), rotated in place of the handles.
  virtual void rotate(Graph& g, Var& q, Var& k, const PosContext& pc, int64_t n_heads,
                      int64_t n_kv_heads, int64_t head_size) {}
  // False if rotate() is the no-op above: attention then reads q, k and v straight from
  // the fused projection instead of copying them apart for rotate(). True by default, the
  // safe answer for a variant that does not say; the conformance check verifies false.
  virtual bool rotates() const { return true; }
  // Per-head slopes m_h of a linear bias -m_h*(i-j) on attention logits, or null.
  virtual const float* attention_slopes() const { return nullptr; }
  // Longest sequence the encoding supports, or -1 for unlimited.
  virtual int64_t max_positions() const { return -1; }
};

}  // namespace ablate
