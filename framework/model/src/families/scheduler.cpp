// Family "scheduler": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new scheduler NAME`; its conformance checks are in conformance/scheduler.cpp.
#include "ablate/scheduler.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: a learning-rate schedule for ablate (family "scheduler"), from
// `ablate plugin new scheduler @NAME@`. lr = optimizer.lr * factor(step, total).
// As generated: linear warmup, then exponential decay to final_factor at the last step.
#include <algorithm>
#include <cmath>

#include "ablate/plugin.hpp"
#include "ablate/scheduler.hpp"

namespace {

class @CLASS@ final : public ablate::Scheduler {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : warmup_(o.get_in<int64_t>("warmup", 0, 0, int64_t{1000000000}, "linear warmup steps")),
        final_(o.get_in<double>("final_factor", 0.1, 1e-6, 1.0, "factor reached at the last step")) {}

  float factor(int64_t step, int64_t total) const override {
    step = std::max<int64_t>(step, 0);
    const double progress = total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0) : 0.0;
    double f = std::pow(final_, progress);
    if (warmup_ > 0 && step < warmup_) f *= static_cast<double>(step + 1) / static_cast<double>(warmup_);
    return static_cast<float>(f);
  }

 private:
  int64_t warmup_;
  double final_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Scheduler, @NAME@, @CLASS@, "linear warmup then exponential decay")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Scheduler::kFamily;
  d.key = "scheduler";
  d.list = false;
  d.default_variant = "constant";
  d.summary = "the learning-rate factor at each step";
  d.checks = &conformance::check_scheduler;
  d.template_summary = "linear warmup then exponential decay";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
