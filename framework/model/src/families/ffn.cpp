// Family "ffn": its descriptor (see ablate/family.hpp) and conformance checks (the
// skeleton of `ablate plugin new ffn NAME` is tools/plugin_skeletons/ffn.cpp).
#include "ablate/ffn.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

void check_ffn(Checker& ck, const Subject& s) {
  check_rowwise<Ffn>(ck, s, 12, 6, 1.0f, 0.5f, true);
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Ffn::kFamily;
  d.key = "model.ffn";
  d.list = false;
  d.default_variant = "relu";
  d.summary = "the feed-forward sublayer of each block: x (B*T, C) -> (B*T, C)";
  d.checks = &check_ffn;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
