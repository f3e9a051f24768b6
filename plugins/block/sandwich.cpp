// Sandwich block (Ding et al. 2021, CogView; the pre+post norms of Gemma 2): a norm before
// and after each sublayer, x + norm1_post(attn(norm1(x))), then
// x + norm2_post(ffn(norm2(x))). The second norm bounds what each sublayer adds to the
// residual stream, which is itself not normalised: a final norm by default.
#include "ablate/block.hpp"
#include "ablate/ops.hpp"

namespace {

class Sandwich final : public ablate::Block {
 public:
  Sandwich(const ablate::Options&, const ablate::BuildContext& c) : p_(c.dims.dropout) {
    const ablate::BlockParts& parts = ablate::block_parts(c);
    norm1_ = parts.norm(c, "norm1.");
    attn_ = parts.attention(c, "attn.");
    norm1_post_ = parts.norm(c, "norm1_post.");
    norm2_ = parts.norm(c, "norm2.");
    ffn_ = parts.ffn(c, "ffn.");
    norm2_post_ = parts.norm(c, "norm2_post.");
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    ablate::Var a = norm1_post_->forward(g, attn_->forward(g, norm1_->forward(g, x), in));
    x = ablate::add(g, x, ablate::dropout(g, a, p_));
    ablate::Var f = norm2_post_->forward(g, ffn_->forward(g, norm2_->forward(g, x)));
    return ablate::add(g, x, ablate::dropout(g, f, p_));
  }
  const ablate::Attention& attention() const override { return *attn_; }
  bool final_norm() const override { return true; }

 private:
  float p_;
  std::unique_ptr<ablate::Norm> norm1_, norm1_post_, norm2_, norm2_post_;
  std::unique_ptr<ablate::Attention> attn_;
  std::unique_ptr<ablate::Ffn> ffn_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Block, sandwich, Sandwich,
              "sandwich block: a norm before and after each sublayer, x + norm(attn(norm(x)))")
