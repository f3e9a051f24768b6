// Family "head": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/head.cpp, the skeleton of `ablate plugin new head NAME` is
// tools/plugin_skeletons/head.cpp.
#include "ablate/head.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Head::kFamily;
  d.key = "model.head";
  d.list = false;
  d.default_variant = "linear";
  d.summary = "the LM head: the last hidden states (B*T, C) -> logits (B*T, V)";
  d.checks = &conformance::check_head;
  return d;
}());

}  // namespace
}  // namespace ablate
