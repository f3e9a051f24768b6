// Plugin families declared as data. Each family (ffn, norm, optimizer, ...) is its
// interface header (ablate/<family>.hpp, with `static constexpr const char* kFamily`), its
// conformance suite (framework/model/src/conformance/<family>.cpp), the skeleton of
// `ablate plugin new` (tools/plugin_skeletons/<family>.cpp) and one file
// framework/model/src/families/<family>.cpp that registers a FamilyDescriptor: where
// experiments choose it, its default variant and its suite. The registry, `ablate plugins`,
// `ablate plugin new/check`, the conformance runner and the model and trainer (for defaults)
// loop over these descriptors; none of them names a family's variants. docs/PLUGINS.md, "Adding a
// family", shows the steps.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "ablate/options.hpp"

namespace ablate {

namespace conformance {
class Checker;
struct Subject;
}  // namespace conformance

struct FamilyDescriptor {
  std::string name;             // PluginInfo::family and the heading in `ablate plugins`: "ffn"
  std::string key;              // where an experiment chooses the variant: "model.ffn", "optimizer"
  bool list = false;            // the key holds a list of variants ({type: NAME, ...} each): "eval"
  std::string default_variant;  // taken when the key is absent; "" if there is none
  std::string summary;          // one line: what a variant of this family does
  // Conformance suite (framework/model/src/conformance/): run by `ablate plugin check`
  // and by the test suite on every variant.
  void (*checks)(conformance::Checker&, const conformance::Subject&) = nullptr;
  // Options a variant reads beyond its constructor's, for `ablate plugins`: (heading, docs)
  // sections, found by calling it in describe mode (a task's data flags and evaluator
  // options). Null: none.
  std::vector<std::pair<std::string, std::vector<OptionDoc>>> (*more_options)(void* variant) =
      nullptr;
};

// Adds a family (at static initialisation, from its file in framework/model/src/families/);
// returns true. A second family of the same name is a programming error (aborts).
bool register_family(const FamilyDescriptor& d);

// Every family, sorted by name.
std::vector<const FamilyDescriptor*> families();
const FamilyDescriptor* find_family(const std::string& name);
// The family, or an Error listing the families with a did-you-mean.
const FamilyDescriptor& family(const std::string& name);
std::vector<std::string> family_names();

// The options of `family` in the section `parent` (the experiment's root, or `model` for
// "model.*" keys): the child at the last part of the family's key, with `type: <default>`
// written in when the config names no variant, so that the saved config says what ran.
Options family_options(const Options& parent, const std::string& family);

// How an experiment selects variant `name` of the family, as a command-line override:
// "model.ffn=my_ffn", "'eval=[{type: my_eval}]'".
std::string selection_override(const FamilyDescriptor& d, const std::string& name);

}  // namespace ablate
