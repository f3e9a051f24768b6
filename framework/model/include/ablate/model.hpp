// A GPT assembled from plugins: token embedding, positional encoding, N blocks (block
// family: prenorm, postnorm, parallel, ...; each builds its attention, FFN and norms from
// model.attention, model.ffn, model.norm), optional final norm, LM head (head family,
// model.head; optionally tied to the embedding). Configured by the `model:` section; model.block
// chooses the block of every layer, model.blocks one per layer (docs/MODELS.md).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ablate/batch.hpp"
#include "ablate/block.hpp"
#include "ablate/graph.hpp"
#include "ablate/head.hpp"
#include "ablate/options.hpp"
#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace ablate {

// Per row of B windows of T prepared targets (-1: not scored): the positions up to and
// including the first scored one, the prompt a prefix LM may read whole (T if none is
// scored). No scored position can then see its target. Fills `prefix` (B), reusing its
// memory (a training step allocates nothing).
void scored_prefix(const int32_t* targets, int64_t batch, int64_t time,
                   std::vector<int32_t>& prefix);

class Model {
 public:
  // Reads and validates every key of `opts` (the model: section); the vocabulary size
  // comes from the tokenizer. `vocab`: the tokens' texts by id (token_texts), for plugins
  // that read tokens (BuildContext::vocab; ids past its end are ""), or empty if unknown.
  Model(const Options& opts, int64_t vocab_size, uint64_t seed,
        const std::vector<std::string>& vocab = {});
  ~Model();

  // logits (B*T, V), from the model's head.
  // `in`: the batch's input fields (batch.hpp); the model sets layer and positional for
  // each block it calls.
  Var forward(Graph& g, const Batch& in);

  std::vector<KVCache> make_caches(int64_t batch, int64_t capacity) const;
  ParamStore& params() { return params_; }
  const ModelDims& dims() const { return dims_; }
  int64_t n_params() const { return params_.count(); }
  // Parameters excluding a learned position table (the 6N of nanoGPT's FLOPs estimate).
  int64_t n_params_non_position() const;
  // nanoGPT's estimate: 6 N + 12 L d T, for one token of training (forward + backward).
  double flops_per_token() const;
  // True if every block's attention is causal (no position sees a later one).
  bool causal() const;

  // For inspection (ablate inspect): the positional encoding, the token embedding
  // (V, C) and the LM head weight (C, V), null when tied to the embedding.
  PositionalEncoding& positional() { return *positional_; }
  const std::string& positional_type() const { return positional_type_; }  // its registered name
  const Tensor& token_embedding() const { return tok_emb_->value; }
  const Tensor* lm_head_weight() const { return head_->weight(); }

 private:
  class Parts;
  ModelDims dims_;
  ParamStore params_;
  Parameter* tok_emb_ = nullptr;
  std::unique_ptr<PositionalEncoding> positional_;
  std::string positional_type_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<Norm> final_norm_;
  std::unique_ptr<Head> head_;
  int64_t position_params_ = 0;
};

}  // namespace ablate
