// Pre-norm block (GPT-2, the default): x + attn(norm1(x)), then + ffn(norm2(x)). The
// residual stream itself is never normalised, so the model ends with a final norm.
#include "ablate/block.hpp"
#include "ablate/ops.hpp"

namespace {

class PreNorm final : public ablate::Block {
 public:
  PreNorm(const ablate::Options&, const ablate::BuildContext& c) : p_(c.dims.dropout) {
    const ablate::BlockParts& parts = ablate::block_parts(c);
    norm1_ = parts.norm(c, "norm1.");  // creation order = parameter order (initial values)
    attn_ = parts.attention(c, "attn.");
    norm2_ = parts.norm(c, "norm2.");
    ffn_ = parts.ffn(c, "ffn.");
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    x = ablate::add(g, x, ablate::dropout(g, attn_->forward(g, norm1_->forward(g, x), in), p_));
    return ablate::add(g, x, ablate::dropout(g, ffn_->forward(g, norm2_->forward(g, x)), p_));
  }
  const ablate::Attention& attention() const override { return *attn_; }
  bool final_norm() const override { return true; }

 private:
  float p_;
  std::unique_ptr<ablate::Norm> norm1_, norm2_;
  std::unique_ptr<ablate::Attention> attn_;
  std::unique_ptr<ablate::Ffn> ffn_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Block, prenorm, PreNorm,
              "pre-norm block (GPT-2): x + attn(norm(x)), x + ffn(norm(x))")
