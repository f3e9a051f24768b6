// Family "positional": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/positional.cpp, the skeleton of `ablate plugin new positional NAME` is
// tools/plugin_skeletons/positional.cpp.
#include "ablate/positional.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = PositionalEncoding::kFamily;
  d.key = "model.positional";
  d.list = false;
  d.default_variant = "learned";
  d.summary = "positions: added to the embeddings, rotating q and k, or attention biases";
  d.checks = &conformance::check_positional;
  return d;
}());

}  // namespace
}  // namespace ablate
