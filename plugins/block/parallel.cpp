// Parallel block (GPT-J, PaLM): x + attn(norm(x)) + ffn(norm(x)), both sublayers reading
// the same input, so their products can run together. shared_norm: true (GPT-J's and
// PaLM's choice) uses one norm for both; false gives each sublayer its own (norm1 for
// attention, norm2 for the FFN). Pre-norm residual stream: a final norm by default.
#include "ablate/block.hpp"
#include "ablate/ops.hpp"

namespace {

class Parallel final : public ablate::Block {
 public:
  Parallel(const ablate::Options& o, const ablate::BuildContext& c) : p_(c.dims.dropout) {
    const bool shared = o.get<bool>("shared_norm", true,
                                    "one norm feeds both sublayers (GPT-J, PaLM); false: one each");
    const ablate::BlockParts& parts = ablate::block_parts(c);
    norm1_ = parts.norm(c, "norm1.");
    attn_ = parts.attention(c, "attn.");
    if (!shared) norm2_ = parts.norm(c, "norm2.");
    ffn_ = parts.ffn(c, "ffn.");
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::Batch& in) override {
    ablate::Var h1 = norm1_->forward(g, x);
    ablate::Var h2 = norm2_ ? norm2_->forward(g, x) : h1;
    ablate::Var a = ablate::dropout(g, attn_->forward(g, h1, in), p_);
    ablate::Var f = ablate::dropout(g, ffn_->forward(g, h2), p_);
    return ablate::add(g, ablate::add(g, x, a), f);
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
ABLATE_PLUGIN(ablate::Block, parallel, Parallel,
              "parallel block (GPT-J, PaLM): x + attn(norm(x)) + ffn(norm(x)), shared norm or two")
