// Text generation with a KV cache: the prompt is encoded once, then each new token
// costs one single-position forward pass. When the context fills, the window shifts:
// the last context/2 tokens are re-encoded and decoding continues, so every token sees
// at least context/2 tokens of history (exact sliding windows would re-encode the whole
// context for every token, as recompute-everything generation does).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ablate/graph.hpp"
#include "ablate/model.hpp"
#include "ablate/tensor.hpp"

namespace ablate {

struct Sampling {
  float temperature = 1.0f;  // <= 0 or greedy: argmax
  int64_t top_k = 0;         // 0: all tokens
  float top_p = 1.0f;        // nucleus: smallest set with cumulative probability >= top_p
  bool greedy = false;
};

// Draws one token id from logits (V) under `s`; scratch needs 2*V floats.
int32_t sample_token(const float* logits, int64_t V, const Sampling& s, Rng& rng, float* scratch);

// Continues `prompt` by n tokens; on_token (optional) sees each new id as it is drawn.
std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int64_t n, const Sampling& s,
                              Rng& rng, const std::function<void(int32_t)>& on_token = {});

}  // namespace ablate
