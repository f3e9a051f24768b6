// Family "init": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/init.cpp, the skeleton of `ablate plugin new init NAME` is
// tools/plugin_skeletons/init.cpp.
#include "ablate/init.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Initializer::kFamily;
  d.key = "model.init";
  d.list = false;
  d.default_variant = "gpt2";
  d.summary = "initial values of the parameters, by role and shape";
  d.checks = &conformance::check_init;
  return d;
}());

}  // namespace
}  // namespace ablate
