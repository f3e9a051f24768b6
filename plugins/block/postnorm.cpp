// Post-norm block (the original Transformer, GPT-1): norm1(x + attn(x)), then
// norm2(x + ffn(x)). Its output is normalised already: no final norm by default.
#include "ablate/block.hpp"
#include "ablate/ops.hpp"

namespace {

class PostNorm final : public ablate::Block {
 public:
  PostNorm(const ablate::Options&, const ablate::BuildContext& c) : p_(c.dims.dropout) {
    const ablate::BlockParts& parts = ablate::block_parts(c);
    norm1_ = parts.norm(c, "norm1.");
    attn_ = parts.attention(c, "attn.");
    norm2_ = parts.norm(c, "norm2.");
    ffn_ = parts.ffn(c, "ffn.");
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    x = norm1_->forward(g, ablate::add(g, x, ablate::dropout(g, attn_->forward(g, x, in), p_)));
    return norm2_->forward(g, ablate::add(g, x, ablate::dropout(g, ffn_->forward(g, x), p_)));
  }
  const ablate::Attention& attention() const override { return *attn_; }
  bool final_norm() const override { return false; }

 private:
  float p_;
  std::unique_ptr<ablate::Norm> norm1_, norm2_;
  std::unique_ptr<ablate::Attention> attn_;
  std::unique_ptr<ablate::Ffn> ffn_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Block, postnorm, PostNorm,
              "post-norm block (GPT-1): norm(x + attn(x)), norm(x + ffn(x))")
