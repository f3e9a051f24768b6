// Family "head": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new head NAME`; its conformance checks are in conformance/head.cpp.
#include "ablate/head.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: an LM head for ablate (family "head"), from `ablate plugin new head @NAME@`.
// As generated: a linear head whose logits are multiplied by a fixed `scale` (muP's output
// multiplier): logits = scale * (x W + b), W (C, V) of its own, or the token embedding
// transposed when model.tie_embeddings ties them; b when model.head_bias.
#include <string>

#include "ablate/head.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Head {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c)
      : scale_(o.get_in<float>("scale", 1.0f, 1e-6f, 1e6f, "multiplies the logits")), emb_(c.tied_embedding) {
    const int64_t C = c.dims.d_model, V = c.dims.vocab_size;
    if (C <= 0 || V <= 0) o.fail("", "d_model and vocab_size must be positive");
    ablate::ParamScope ps = c.params;
    if (!emb_) w_ = &ps.add("weight", C, V, ablate::Role::kHead);  // tied: the embedding serves
    if (c.dims.bias) b_ = &ps.add("bias", 1, V, ablate::Role::kBias);  // dims.bias is model.head_bias
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    ablate::Var b = b_ ? g.param(*b_) : ablate::Var{};
    ablate::Var z = emb_ ? ablate::linear(g, x, g.param(*emb_), b, /*transpose_w=*/true)  // x E^T
                         : ablate::linear(g, x, g.param(*w_), b);                         // x W
    return ablate::scale(g, z, scale_);  // (B*T, V)
  }
  const ablate::Tensor* weight() const override { return w_ ? &w_->value : nullptr; }

 private:
  float scale_;
  ablate::Parameter* emb_ = nullptr;
  ablate::Parameter *w_ = nullptr, *b_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Head, @NAME@, @CLASS@, "linear LM head with scaled logits")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Head::kFamily;
  d.key = "model.head";
  d.list = false;
  d.default_variant = "linear";
  d.summary = "the LM head: the last hidden states (B*T, C) -> logits (B*T, V)";
  d.checks = &conformance::check_head;
  d.template_summary = "linear LM head with scaled logits";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
