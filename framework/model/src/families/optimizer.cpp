// Family "optimizer": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/optimizer.cpp, the skeleton of `ablate plugin new optimizer NAME` is
// tools/plugin_skeletons/optimizer.cpp.
#include "ablate/optimizer.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Optimizer::kFamily;
  d.key = "optimizer";
  d.list = false;
  d.default_variant = "adamw";
  d.summary = "updates the parameters from their gradients";
  d.checks = &conformance::check_optimizer;
  return d;
}());

}  // namespace
}  // namespace ablate
