// Skeletons written by `ablate plugin new <family> <name>`: one source per family, each a
// small working variant that builds against an installed ablate and passes
// `ablate plugin check` as it is. @NAME@ is replaced by the variant's name, @CLASS@ by its
// CamelCase form.
#pragma once
#include <string>
#include <vector>

namespace ablate::cli {

struct PluginTemplate {
  std::string family;
  std::string summary;  // what the skeleton implements
  std::string source;   // <name>.cpp
};

const std::vector<PluginTemplate>& plugin_templates();

// CMakeLists.txt of an out-of-tree plugin project.
std::string plugin_cmakelists();

}  // namespace ablate::cli
