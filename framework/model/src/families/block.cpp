// Family "block": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/block.cpp, the skeleton of `ablate plugin new block NAME` is
// tools/plugin_skeletons/block.cpp.
#include "ablate/block.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Block::kFamily;
  d.key = "model.block";
  d.list = false;
  d.default_variant = "prenorm";
  d.summary =
      "one layer, residuals included, wired from the model's attention, FFN and norm: x (B*T, C) "
      "-> (B*T, C)";
  d.checks = &conformance::check_block;
  return d;
}());

}  // namespace
}  // namespace ablate
