// Family "objective": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/objective.cpp, the skeleton of `ablate plugin new objective NAME` is
// tools/plugin_skeletons/objective.cpp.
#include "ablate/objective.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Objective::kFamily;
  d.key = "objective";
  d.list = false;
  d.default_variant = "next_token";
  d.summary =
      "what the model learns to predict: inputs and targets from windows of text, the loss, "
      "evaluation metrics";
  d.checks = &conformance::check_objective;
  return d;
}());

}  // namespace
}  // namespace ablate
