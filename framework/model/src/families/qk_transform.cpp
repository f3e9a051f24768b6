// Family "qk_transform": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/qk_transform.cpp, the skeleton of `ablate plugin new qk_transform NAME` is
// tools/plugin_skeletons/qk_transform.cpp.
#include "ablate/qk_transform.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = QkTransform::kFamily;
  d.key = "model.attention.qk_transform";
  d.list = false;
  d.default_variant = "none";
  d.summary = "q, k and v head by head, between attention's projection and the attention (QK-norm)";
  d.checks = &conformance::check_qk_transform;
  return d;
}());

}  // namespace
}  // namespace ablate
