// Family "ffn": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new ffn NAME`; its conformance checks are in conformance/rowwise.cpp.
#include "ablate/ffn.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: a feed-forward variant for ablate (family "ffn"), from `ablate plugin new ffn @NAME@`.
// As generated: the squared-ReLU FFN of Primer (So et al. 2021): relu(x W1 + b1)^2 W2 + b2.
// x (B*T, C) -> (B*T, C), hidden width H.
#include <algorithm>
#include <cmath>
#include <string>

#include "ablate/ffn.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Ffn {
 public:
  // Options are read where they are used: reading validates and documents them
  // (`ablate plugins ffn` lists them); keys nobody reads are rejected as unknown.
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c) {
    const int64_t C = c.dims.d_model;
    if (C <= 0) o.fail("", "d_model must be positive, got " + std::to_string(C));
    const int64_t hidden = o.get_in<int64_t>("hidden", 0, 0, int64_t{1} << 24, "hidden width H; 0 = ffn_multiplier * d_model");
    const bool bias = o.get<bool>("bias", c.dims.bias, "biases on both linear layers (default: model.bias)");
    H_ = hidden > 0 ? hidden : c.dims.ffn_multiplier * C;
    // Parameters are created through the scope, so their names are hierarchical
    // ("blocks.0.ffn.up.weight") and they are saved, decayed and optimised with the model.
    // Their role decides their initial values (model.init) and how optimizers treat them.
    ablate::ParamScope ps = c.params;
    w1_ = &ps.add("up.weight", C, H_, ablate::Role::kHidden);
    if (bias) b1_ = &ps.add("up.bias", 1, H_, ablate::Role::kBias);
    w2_ = &ps.add("down.weight", H_, C, ablate::Role::kResidualOut);  // writes into the residual stream
    if (bias) b2_ = &ps.add("down.bias", 1, C, ablate::Role::kBias);
  }

  // Composed of ops (ablate/ops.hpp), so the backward pass comes for free.
  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    ablate::Var h = ablate::linear(g, x, g.param(*w1_), b1_ ? g.param(*b1_) : ablate::Var{});  // (B*T, H)
    h = ablate::relu(g, h);
    h = ablate::mul(g, h, h);
    return ablate::linear(g, h, g.param(*w2_), b2_ ? g.param(*b2_) : ablate::Var{});           // (B*T, C)
  }

 private:
  int64_t H_ = 0;
  ablate::Parameter *w1_ = nullptr, *b1_ = nullptr, *w2_ = nullptr, *b2_ = nullptr;
};

}  // namespace
// The registered name is what experiments write: `model: {ffn: @NAME@}`.
ABLATE_PLUGIN(ablate::Ffn, @NAME@, @CLASS@, "squared-ReLU feed-forward network (Primer)")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Ffn::kFamily;
  d.key = "model.ffn";
  d.list = false;
  d.default_variant = "relu";
  d.summary = "the feed-forward sublayer of each block: x (B*T, C) -> (B*T, C)";
  d.checks = &conformance::check_ffn;
  d.template_summary = "squared-ReLU feed-forward network (Primer)";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
