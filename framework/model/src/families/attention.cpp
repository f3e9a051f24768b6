// Family "attention": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/attention.cpp, the skeleton of `ablate plugin new attention NAME` is
// tools/plugin_skeletons/attention.cpp.
#include "ablate/attention.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Attention::kFamily;
  d.key = "model.attention";
  d.list = false;
  d.default_variant = "causal";
  d.summary = "the attention sublayer of each block, with its mask and KV cache";
  d.checks = &conformance::check_attention;
  return d;
}());

}  // namespace
}  // namespace ablate
