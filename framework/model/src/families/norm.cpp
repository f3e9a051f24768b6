// Family "norm": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new norm NAME`; its conformance checks are in conformance/rowwise.cpp.
#include "ablate/norm.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: a normalisation variant for ablate (family "norm"), from `ablate plugin new norm @NAME@`.
// As generated: RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * gain.
// x (B*T, C) -> (B*T, C); gain (1, C). Placement (pre/post) is the model's business.
#include <string>

#include "ablate/norm.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Norm {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c)
      : eps_(o.get_in<float>("eps", 1e-5f, 1e-12f, 1.0f, "added to the mean square")) {
    if (c.dims.d_model <= 0) o.fail("", "d_model must be positive, got " + std::to_string(c.dims.d_model));
    ablate::ParamScope ps = c.params;
    gain_ = &ps.add("weight", 1, c.dims.d_model, ablate::Role::kGain);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x) override { return ablate::rmsnorm(g, x, g.param(*gain_), eps_); }

 private:
  float eps_;
  ablate::Parameter* gain_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Norm, @NAME@, @CLASS@, "RMS normalisation with a learned gain")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Norm::kFamily;
  d.key = "model.norm";
  d.list = false;
  d.default_variant = "layernorm";
  d.summary = "a normalisation over channels: x (B*T, C) -> (B*T, C)";
  d.checks = &conformance::check_norm;
  d.template_summary = "RMS normalisation with a learned gain";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
