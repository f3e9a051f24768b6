// The files `ablate plugin new <family> <name>` writes: the family's skeleton, a real plugin
// source in tools/plugin_skeletons/<family>.cpp embedded at build time, and a CMakeLists.txt.
#pragma once
#include <string>
#include <vector>

namespace ablate::cli {

// The skeleton of one family: a small working variant that passes the family's checks,
// named my_<family> (class My<Family>, e.g. MyQkTransform); `plugin new` renames both.
struct PluginSkeleton {
  const char* family;
  const char* summary;  // what it implements: the summary of its ABLATE_PLUGIN line
  const char* source;
};

// Every family's skeleton, sorted by family (generated from tools/plugin_skeletons/).
const std::vector<PluginSkeleton>& plugin_skeletons();

// CMakeLists.txt of an out-of-tree plugin project (@NAME@ stands for the variant's name).
std::string plugin_cmakelists();

}  // namespace ablate::cli
