// Family "ffn": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/rowwise.cpp, the skeleton of `ablate plugin new ffn NAME` is
// tools/plugin_skeletons/ffn.cpp.
#include "ablate/ffn.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Ffn::kFamily;
  d.key = "model.ffn";
  d.list = false;
  d.default_variant = "relu";
  d.summary = "the feed-forward sublayer of each block: x (B*T, C) -> (B*T, C)";
  d.checks = &conformance::check_ffn;
  return d;
}());

}  // namespace
}  // namespace ablate
