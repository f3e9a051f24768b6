// my_block: a block variant for ablate (family "block"), from `ablate plugin new block my_block`.
// As generated: DeepNorm (Wang et al. 2022, DeepNet), a post-norm block whose residual is
// up-weighted: norm1(alpha x + attn(x)), then norm2(alpha x + ffn(x)), alpha = (2 N)^(1/4)
// for N layers (the paper's decoder value; its down-scaled init of the sublayers is left
// out). A block builds its attention, FFN and norms from the model's options through
// block_parts(ctx), in a fixed order (the order of their parameters).
#include <cmath>

#include "ablate/block.hpp"
#include "ablate/ops.hpp"

namespace {

class MyBlock final : public ablate::Block {
 public:
  MyBlock(const ablate::Options& o, const ablate::BuildContext& c)
      : alpha_(o.get_in<float>("alpha", 0.0f, 0.0f, 1000.0f, "residual weight; 0: (2 n_layers)^(1/4)")), p_(c.dims.dropout) {
    if (alpha_ == 0.0f) alpha_ = std::pow(2.0f * static_cast<float>(c.dims.n_layers), 0.25f);
    const ablate::BlockParts& parts = ablate::block_parts(c);
    norm1_ = parts.norm(c, "norm1.");
    attn_ = parts.attention(c, "attn.");
    norm2_ = parts.norm(c, "norm2.");
    ffn_ = parts.ffn(c, "ffn.");
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    ablate::Var a = ablate::dropout(g, attn_->forward(g, x, in), p_);
    x = norm1_->forward(g, ablate::add(g, ablate::scale(g, x, alpha_), a));
    ablate::Var f = ablate::dropout(g, ffn_->forward(g, x), p_);
    return norm2_->forward(g, ablate::add(g, ablate::scale(g, x, alpha_), f));
  }
  const ablate::Attention& attention() const override { return *attn_; }
  bool final_norm() const override { return false; }  // the output is normalised already

 private:
  float alpha_, p_;
  std::unique_ptr<ablate::Norm> norm1_, norm2_;
  std::unique_ptr<ablate::Attention> attn_;
  std::unique_ptr<ablate::Ffn> ffn_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Block, my_block, MyBlock, "DeepNorm block: norm(alpha x + sublayer(x)), alpha = (2 N)^(1/4)")
