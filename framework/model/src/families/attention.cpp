// Family "attention": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new attention NAME`; its conformance checks are in conformance/attention.cpp.
#include "ablate/attention.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate = R"TPL(// @NAME@: an attention variant for ablate (family "attention"), from
// `ablate plugin new attention @NAME@`. As generated: multi-head self-attention with separate
// q, k, v projections and the fused attention op (ablate/ops.hpp), which handles the causal
// mask, padding masks, ALiBi-style slopes, KV caches and attention weights.
// x (B*T, C) -> q, k, v (B*T, NH*HS) -> attention -> y Wo -> (B*T, C).
#include <string>

#include "ablate/attention.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Attention {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c)
      : causal_(o.get<bool>("causal", true, "causal mask (decoder); false: every token sees every token (encoder)")) {
    C_ = c.dims.d_model;
    NH_ = c.dims.n_heads;
    if (C_ <= 0 || NH_ <= 0 || C_ % NH_ != 0)
      o.fail("", "needs n_heads dividing d_model, got d_model = " + std::to_string(C_) + ", n_heads = " + std::to_string(NH_));
    HS_ = C_ / NH_;
    ablate::ParamScope ps = c.params;
    wq_ = &ps.add("q.weight", C_, C_, ablate::Role::kHidden);
    wk_ = &ps.add("k.weight", C_, C_, ablate::Role::kHidden);
    wv_ = &ps.add("v.weight", C_, C_, ablate::Role::kHidden);
    wo_ = &ps.add("proj.weight", C_, C_, ablate::Role::kResidualOut);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::AttentionInput& in) override {
    ablate::Var q = ablate::linear(g, x, g.param(*wq_));  // (B*T, NH*HS)
    ablate::Var k = ablate::linear(g, x, g.param(*wk_));
    ablate::Var v = ablate::linear(g, x, g.param(*wv_));
    if (in.positional) in.positional->rotate(g, q, k, in.pos, NH_, NH_, HS_);  // RoPE and friends
    ablate::AttentionSpec spec;
    spec.batch = in.pos.batch;
    spec.time = in.pos.time;
    spec.n_heads = NH_;
    spec.n_kv_heads = NH_;
    spec.head_size = HS_;
    spec.causal = causal_;
    spec.slopes = in.positional ? in.positional->attention_slopes() : nullptr;  // ALiBi
    spec.key_mask = in.key_mask;
    spec.weights_out = in.weights_out;
    spec.cache = in.cache;
    ablate::Var y = ablate::attention(g, q, k, v, spec);  // (B*T, C)
    return ablate::linear(g, y, g.param(*wo_));
  }

  int64_t kv_width() const override { return C_; }  // one cached key row: NKV*HS
  int64_t n_heads() const override { return NH_; }
  bool causal() const override { return causal_; }

 private:
  bool causal_;
  int64_t C_ = 0, NH_ = 0, HS_ = 0;
  ablate::Parameter *wq_ = nullptr, *wk_ = nullptr, *wv_ = nullptr, *wo_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Attention, @NAME@, @CLASS@, "multi-head self-attention with separate q, k, v projections")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Attention::kFamily;
  d.key = "model.attention";
  d.list = false;
  d.default_variant = "causal";
  d.summary = "the attention sublayer of each block, with its mask and KV cache";
  d.checks = &conformance::check_attention;
  d.template_summary = "multi-head self-attention with separate q, k, v projections";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
