// Family "block": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new block NAME`; its conformance checks are in conformance/block.cpp.
#include "ablate/block.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: a block variant for ablate (family "block"), from `ablate plugin new block @NAME@`.
// As generated: DeepNorm (Wang et al. 2022, DeepNet), a post-norm block whose residual is
// up-weighted: norm1(alpha x + attn(x)), then norm2(alpha x + ffn(x)), alpha = (2 N)^(1/4)
// for N layers (the paper's decoder value; its down-scaled init of the sublayers is left
// out). A block builds its attention, FFN and norms from the model's options through
// block_parts(ctx), in a fixed order (the order of their parameters).
#include <cmath>

#include "ablate/block.hpp"
#include "ablate/ops.hpp"

namespace {

class @CLASS@ final : public ablate::Block {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c)
      : alpha_(o.get_in<float>("alpha", 0.0f, 0.0f, 1000.0f, "residual weight; 0: (2 n_layers)^(1/4)")), p_(c.dims.dropout) {
    if (alpha_ == 0.0f) alpha_ = std::pow(2.0f * static_cast<float>(c.dims.n_layers), 0.25f);
    const ablate::BlockParts& parts = ablate::block_parts(c);
    norm1_ = parts.norm(c, "norm1.");
    attn_ = parts.attention(c, "attn.");
    norm2_ = parts.norm(c, "norm2.");
    ffn_ = parts.ffn(c, "ffn.");
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::AttentionInput& in) override {
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
ABLATE_PLUGIN(ablate::Block, @NAME@, @CLASS@, "DeepNorm block: norm(alpha x + sublayer(x)), alpha = (2 N)^(1/4)")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Block::kFamily;
  d.key = "model.block";
  d.list = false;
  d.default_variant = "prenorm";
  d.summary =
      "one layer, residuals included, wired from the model's attention, FFN and norm: x (B*T, C) "
      "-> (B*T, C)";
  d.checks = &conformance::check_block;
  d.template_summary = "DeepNorm block: norm(alpha x + sublayer(x)), alpha = (2 N)^(1/4)";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
