// Family "evaluator": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/evaluator.cpp, the skeleton of `ablate plugin new evaluator NAME` is
// tools/plugin_skeletons/evaluator.cpp.
#include "ablate/evaluator.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Evaluator::kFamily;
  d.key = "eval";
  d.list = true;
  d.default_variant = "";
  d.summary = "metrics beside the loss at every evaluation";
  d.checks = &conformance::check_evaluator;
  return d;
}());

}  // namespace
}  // namespace ablate
