// One batch as the model's parts see it: the token ids and their shape, positions, padding
// mask, prompts, KV caches and attention-weights buffers. The caller of Model::forward fills
// the input fields; the model passes the same Batch on to the positional encoding, and to
// each block (hence its attention and q/k/v transform) with `layer` and `positional` set.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/ops.hpp"

namespace ablate {

class PositionalEncoding;  // positional.hpp

struct Batch {
  // (B*T) token ids, or null (a probe without tokens, e.g. ablate inspect, or an attention
  // or positional encoding called on its own).
  const int32_t* ids = nullptr;
  int64_t batch = 1, time = 1;        // B, T
  int64_t pos0 = 0;                   // absolute position of ids[0] (KV-cache decoding)
  const uint8_t* key_mask = nullptr;  // (B*T) 1 = real token, 0 = padding
  // (B) or null: row b's positions before prefix[b] (absolute, as pos0) are its prompt,
  // which no loss scores and generation is given whole; attention with a prefix mask
  // (prefix_lm) lets it read itself whole. Only there may a position's encoding read later
  // ids; null: no prompt, everything causal. Training sets it from the targets
  // (scored_prefix), generation to the prompt's length.
  const int32_t* prefix = nullptr;
  std::vector<KVCache>* caches = nullptr;  // one per layer, for incremental decoding (forward only)
  std::vector<float*>* attention_weights = nullptr;  // per layer (B,NH,T,Tk) buffers to fill

  // Set by the model for the block it calls, not by callers of Model::forward (a test of a
  // block or an attention on its own sets them as the model would):
  int64_t layer = -1;                        // the block's index
  PositionalEncoding* positional = nullptr;  // the model's positional encoding

  int64_t rows() const { return batch * time; }  // B*T

  // This layer's KV cache, or null without caches.
  KVCache* cache() const {
    if (!caches) return nullptr;
    check_layer(caches->size(), "caches");
    return &(*caches)[static_cast<size_t>(layer)];
  }
  // This layer's (B, NH, T, Tk) attention-probabilities buffer, or null (none wanted).
  float* weights_out() const {
    if (!attention_weights) return nullptr;
    check_layer(attention_weights->size(), "attention_weights");
    return (*attention_weights)[static_cast<size_t>(layer)];
  }

 private:
  void check_layer(size_t n, const char* what) const {
    ABLATE_CHECK(layer >= 0 && static_cast<size_t>(layer) < n, "Batch::layer = ", layer,
                 " is outside the ", n, " entries of Batch::", what,
                 "; give one entry per layer (Model::make_caches) and let the model set the "
                 "layer of the block it calls");
  }
};

}  // namespace ablate
