// Constant learning rate: factor 1 at every step.
#include "ablate/plugin.hpp"
#include "ablate/scheduler.hpp"

namespace {

class Constant final : public ablate::Scheduler {
 public:
  Constant(const ablate::Options&, const ablate::BuildContext&) {}
  float factor(int64_t, int64_t) const override { return 1.0f; }
};

}  // namespace
ABLATE_PLUGIN(ablate::Scheduler, constant, Constant, "constant learning rate")
