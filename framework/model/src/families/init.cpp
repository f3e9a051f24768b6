// Family "init": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new init NAME`; its conformance checks are in conformance/init.cpp.
#include "ablate/init.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: an initialisation for ablate (family "init"), from `ablate plugin new init @NAME@`.
// Plugins create parameters with a role (tensor.hpp: ablate::Role); an init variant sets
// their values by role and shape, once, in creation order, drawing from `rng`.
// As generated: LeCun normal, N(0, gain / sqrt(fan_in)), for every matrix (a weight is
// stored (in, out), so fan_in = rows), gains 1, biases 0.
#include <cmath>

#include "ablate/init.hpp"

namespace {

class @CLASS@ final : public ablate::Initializer {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : gain_(o.get_in<float>("gain", 1.0f, 0.0f, 100.0f, "multiplies the std 1 / sqrt(fan_in)")) {}

  void initialise(ablate::Parameter& p, ablate::Rng& rng) const override {
    switch (p.role) {
      case ablate::Role::kGain: ablate::fill(p.value, 1.0f); break;
      case ablate::Role::kBias: ablate::fill(p.value, 0.0f); break;
      default:  // embeddings, positions, hidden and residual-output matrices, the head
        ablate::fill_normal(p.value, rng, gain_ / std::sqrt(static_cast<float>(p.value.rows)));
    }
  }

 private:
  float gain_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Initializer, @NAME@, @CLASS@, "LeCun normal: N(0, 1/sqrt(fan_in)), gains 1, biases 0")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Initializer::kFamily;
  d.key = "model.init";
  d.list = false;
  d.default_variant = "gpt2";
  d.summary = "initial values of the parameters, by role and shape";
  d.checks = &conformance::check_init;
  d.template_summary = "LeCun normal: N(0, 1/sqrt(fan_in)), gains 1, biases 0";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
