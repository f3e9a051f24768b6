// Family "qk_transform": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new qk_transform NAME`; its conformance checks are in
// conformance/qk_transform.cpp.
#include "ablate/qk_transform.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: a transform of attention's q, k and v for ablate (family "qk_transform"), from
// `ablate plugin new qk_transform @NAME@`. Used as model.attention.qk_transform: @NAME@.
// As generated: a learned gain on every column of q (and of k, with `keys`), from 1, which
// lets each head choose how sharp its attention is. Each head of each row on its own.
#include <string>

#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/qk_transform.hpp"

namespace {

class @CLASS@ final : public ablate::QkTransform {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c)
      : keys_(o.get<bool>("keys", false, "also a gain on every column of k")) {
    const int64_t C = c.dims.d_model, NH = c.dims.n_heads;
    if (C <= 0 || NH <= 0 || C % NH != 0) o.fail("", "needs n_heads dividing d_model");
    ablate::ParamScope ps = c.params;  // the attention's scope: blocks.L.attn.qk_transform.
    gq_ = &ps.add("q_gain", 1, C, ablate::Role::kGain);  // a gain starts at 1 (model.init)
    if (keys_) gk_ = &ps.add("k_gain", 1, C, ablate::Role::kGain);
  }

  bool transforms() const override { return true; }

  // q (B*T, NH*HS), k and v (B*T, NKV*HS); mul broadcasts a (1, cols) row over the rows.
  void apply(ablate::Graph& g, ablate::Var& q, ablate::Var& k, ablate::Var&, const ablate::QkvHeads& h) override {
    q = ablate::mul(g, q, g.param(*gq_));
    if (gk_) {
      // k has NKV heads: the gains of the first NKV*HS columns.
      ablate::Var gk = ablate::slice_cols(g, g.param(*gk_), 0, h.n_kv_heads * h.head_size);
      k = ablate::mul(g, k, gk);
    }
  }

 private:
  bool keys_;
  ablate::Parameter *gq_ = nullptr, *gk_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::QkTransform, @NAME@, @CLASS@, "learned gains on the columns of q (and k)")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = QkTransform::kFamily;
  d.key = "model.attention.qk_transform";
  d.list = false;
  d.default_variant = "none";
  d.summary = "q, k and v head by head, between attention's projection and the attention (QK-norm)";
  d.checks = &conformance::check_qk_transform;
  d.template_summary = "learned gains on the columns of q (and k)";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
