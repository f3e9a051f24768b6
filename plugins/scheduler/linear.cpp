// Linear warmup over `warmup` updates, then linear decay from 1 to min_factor, reached at
// step = total (as HF's linear schedule). Warmup counts updates from 1: (step + 1) / warmup.
#include <algorithm>

#include "ablate/plugin.hpp"
#include "ablate/scheduler.hpp"

namespace {

class Linear final : public ablate::Scheduler {
 public:
  Linear(const ablate::Options& o, const ablate::BuildContext&)
      : warmup_(o.get_in<int64_t>("warmup", 0, 0, int64_t{1000000000}, "linear warmup steps")),
        min_factor_(
            o.get_in<double>("min_factor", 0.0, 0.0, 1.0, "factor at the end of training")) {}

  float factor(int64_t step, int64_t total) const override {
    step = std::max<int64_t>(step, 0);
    double f = 1.0;
    if (total > warmup_)
      f = 1.0 - (1.0 - min_factor_) * std::clamp(static_cast<double>(step - warmup_) /
                                                     static_cast<double>(total - warmup_),
                                                 0.0, 1.0);
    if (warmup_ > 0 && step < warmup_)
      f *= static_cast<double>(step + 1) / static_cast<double>(warmup_);
    return static_cast<float>(f);
  }

 private:
  int64_t warmup_;
  double min_factor_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Scheduler, linear, Linear, "linear warmup then linear decay to min_factor")
