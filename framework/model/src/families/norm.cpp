// Family "norm": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/rowwise.cpp, the skeleton of `ablate plugin new norm NAME` is
// tools/plugin_skeletons/norm.cpp.
#include "ablate/norm.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Norm::kFamily;
  d.key = "model.norm";
  d.list = false;
  d.default_variant = "layernorm";
  d.summary = "a normalisation over channels: x (B*T, C) -> (B*T, C)";
  d.checks = &conformance::check_norm;
  return d;
}());

}  // namespace
}  // namespace ablate
