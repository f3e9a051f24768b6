// Test plugin: declares a plugin API version this ablate does not speak.
#include "ablate/norm.hpp"
#include "ablate/plugin.hpp"

namespace {
void* create(const ablate::Options&, const ablate::BuildContext&) { return nullptr; }
const ablate::PluginInfo info{
    ablate::kPluginApiVersion + 998, "norm", "bad_version", "wrong API version", &create, nullptr};
}  // namespace
BOOST_DLL_ALIAS_SECTIONED(info, ablate_plugin, ablate)
