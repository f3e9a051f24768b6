// Test plugin: throws from its constructor; the registry must report it cleanly.
#include <stdexcept>

#include "ablate/norm.hpp"
#include "ablate/plugin.hpp"

namespace {
class Throws final : public ablate::Norm {
 public:
  Throws(const ablate::Options&, const ablate::BuildContext&) {
    throw std::runtime_error("deliberate failure");
  }
  ablate::Var forward(ablate::Graph&, ablate::Var x) override { return x; }
};
}  // namespace
ABLATE_PLUGIN(ablate::Norm, throws, Throws, "throws in its constructor")
