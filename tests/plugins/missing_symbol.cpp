// Test plugin: needs a function that no library provides, so loading it must fail.
#include "ablate/norm.hpp"
#include "ablate/plugin.hpp"

extern "C" void ablate_function_that_does_not_exist();

namespace {
class Broken final : public ablate::Norm {
 public:
  Broken(const ablate::Options&, const ablate::BuildContext&) {
    ablate_function_that_does_not_exist();
  }
  ablate::Var forward(ablate::Graph&, ablate::Var x) override { return x; }
};
}  // namespace
ABLATE_PLUGIN(ablate::Norm, missing_symbol, Broken, "refers to an undefined symbol")
