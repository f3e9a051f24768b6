// Family "tokenizer": its descriptor (see ablate/family.hpp). Its conformance checks are in
// conformance/tokenizer.cpp, the skeleton of `ablate plugin new tokenizer NAME` is
// tools/plugin_skeletons/tokenizer.cpp.
#include "ablate/tokenizer.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Tokenizer::kFamily;
  d.key = "tokenizer";
  d.list = false;
  d.default_variant = "char";
  d.summary = "text to token ids and back, fitted on the training text";
  d.checks = &conformance::check_tokenizer;
  return d;
}());

}  // namespace
}  // namespace ablate
