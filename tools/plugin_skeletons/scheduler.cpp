// my_scheduler: a learning-rate schedule for ablate (family "scheduler"), from
// `ablate plugin new scheduler my_scheduler`. lr = optimizer.lr * factor(step, total).
// As generated: linear warmup, then exponential decay to final_factor at the last step.
#include <algorithm>
#include <cmath>

#include "ablate/plugin.hpp"
#include "ablate/scheduler.hpp"

namespace {

class MyScheduler final : public ablate::Scheduler {
 public:
  MyScheduler(const ablate::Options& o, const ablate::BuildContext&)
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
ABLATE_PLUGIN(ablate::Scheduler, my_scheduler, MyScheduler, "linear warmup then exponential decay")
