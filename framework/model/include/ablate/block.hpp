// Family "block": one transformer layer, residual connections included, built from the
// model's configured leaves (model.attention, model.ffn, model.norm), which a block creates
// through its BuildContext (ctx.parts). Variants differ in where the norms sit and how the
// sublayers combine: prenorm (GPT-2), postnorm (GPT-1), parallel (GPT-J/PaLM), sandwich.
// model.block chooses one for every layer; model.blocks gives one per layer (model.cpp).
#pragma once
#include <memory>
#include <string>

#include "ablate/attention.hpp"
#include "ablate/batch.hpp"
#include "ablate/error.hpp"
#include "ablate/ffn.hpp"
#include "ablate/norm.hpp"
#include "ablate/plugin.hpp"

namespace ablate {

// The model's leaves as configured, for a block to create (BuildContext::parts) in its
// constructor (the pointer is not kept valid after it). `scope` is appended to the
// block's own parameter prefix ("attn." -> "blocks.3.attn."); the order of creation is
// the order of the parameters, hence of their initial values.
class BlockParts {
 public:
  virtual ~BlockParts() = default;
  virtual std::unique_ptr<Attention> attention(const BuildContext& block,
                                               const std::string& scope) const = 0;
  virtual std::unique_ptr<Ffn> ffn(const BuildContext& block, const std::string& scope) const = 0;
  virtual std::unique_ptr<Norm> norm(const BuildContext& block, const std::string& scope) const = 0;
};

// ctx.parts, or an Error saying that a block is built by a model.
inline const BlockParts& block_parts(const BuildContext& ctx) {
  if (!ctx.parts)
    throw Error(
        "a block creates its attention, FFN and norms from the model's options: build it through a "
        "Model "
        "(BuildContext::parts is null)");
  return *ctx.parts;
}

class Block {
 public:
  static constexpr const char* kFamily = "block";
  virtual ~Block() = default;
  // x (B*T, C) -> (B*T, C). `in` (batch.hpp, with this block's layer set by the model) is
  // passed to the attention as is (positions, KV cache, padding mask, prompts, attention
  // weights). Dropout (ctx.dims.dropout) on each residual branch.
  virtual Var forward(Graph& g, Var x, const Batch& in) = 0;
  // The block's attention (KV-cache width, heads, causality).
  virtual const Attention& attention() const = 0;
  // Whether a model of these blocks ends with a norm before the LM head when
  // model.norm.final is not given (pre-norm residual streams are not normalised).
  virtual bool final_norm() const = 0;
};

}  // namespace ablate
