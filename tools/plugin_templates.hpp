// Files written by `ablate plugin new <family> <name>` besides the family's skeleton (which
// its FamilyDescriptor holds, ablate/family.hpp).
#pragma once
#include <string>

namespace ablate::cli {

// CMakeLists.txt of an out-of-tree plugin project.
std::string plugin_cmakelists();

}  // namespace ablate::cli
