// Text generation with a KV cache: the prompt is encoded once, then each new token
// costs one single-position forward pass. When the context fills, the window shifts:
// the last context/2 tokens are re-encoded and decoding continues, so every token sees
// at least context/2 tokens of history (exact sliding windows would re-encode the whole
// context for every token, as recompute-everything generation does).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ablate/graph.hpp"
#include "ablate/model.hpp"
#include "ablate/tensor.hpp"
#include "ablate/tokenizer.hpp"

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
std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int64_t n,
                              const Sampling& s, Rng& rng,
                              const std::function<void(int32_t)>& on_token = {});

// ---- batched decoding of many prompts (task evaluators) ----------------------------------
struct DecodeOptions {
  int64_t batch = 256;  // sequences decoded together
  Sampling sampling;    // greedy unless told otherwise
  uint64_t seed = 0;    // sampling: prompt i draws from Rng(mix(seed, i)), independent of batching
  DecodeOptions() { sampling.greedy = true; }
};

// Continues each prompt until it produces `stop` or max_chars[i] characters. Prompts of
// equal token length are prefilled together in batches, then every step feeds one token
// per sequence through the KV cache. Returns the generated text (including `stop` if
// produced). Error if a prompt plus its answer cannot fit the model's context.
std::vector<std::string> decode_prompts(Model& model, const Tokenizer& tok,
                                        const std::vector<std::string>& prompts,
                                        const std::vector<int64_t>& max_chars,
                                        const DecodeOptions& o, const std::string& stop);

}  // namespace ablate
