// Family "norm": its descriptor (see ablate/family.hpp) and conformance checks (the
// skeleton of `ablate plugin new norm NAME` is tools/plugin_skeletons/norm.cpp).
#include "ablate/norm.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

void check_norm(Checker& ck, const Subject& s) {
  check_rowwise<Norm>(ck, s, 10, 5, 2.0f, 1.0f, false);
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Norm::kFamily;
  d.key = "model.norm";
  d.list = false;
  d.default_variant = "layernorm";
  d.summary = "a normalisation over channels: x (B*T, C) -> (B*T, C)";
  d.checks = &check_norm;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
