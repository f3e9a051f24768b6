// Family "positional": position information acts at three points: added to the token
// embeddings, rotating queries and keys, or biasing attention logits. Each hook
// defaults to nothing; a variant overrides the ones it uses. The hooks get the Batch
// (batch.hpp): B, T, pos0, and the token ids and prompts (Batch::prefix) for encodings
// that depend on the tokens.
#pragma once
#include <cstdint>

#include "ablate/batch.hpp"
#include "ablate/graph.hpp"

namespace ablate {

class PositionalEncoding {
 public:
  static constexpr const char* kFamily = "positional";
  virtual ~PositionalEncoding() = default;
  // x (B*T, C) -> x with positions added.
  virtual Var embed(Graph& g, Var x, const Batch& in) { return x; }
  // q (B*T, NH*HS), k (B*T, NKV*HS), rotated in place of the handles.
  virtual void rotate(Graph& g, Var& q, Var& k, const Batch& in, int64_t n_heads,
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
