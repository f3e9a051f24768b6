// Warmup-stable-decay ("trapezoidal", Hu et al. 2024, MiniCPM): linear warmup over `warmup`
// updates ((step + 1) / warmup), constant 1, then linear decay over the last decay_fraction
// of training, reaching min_factor at step = total.
#include <algorithm>
#include <cmath>

#include "ablate/plugin.hpp"
#include "ablate/scheduler.hpp"

namespace {

class Wsd final : public ablate::Scheduler {
 public:
  Wsd(const ablate::Options& o, const ablate::BuildContext&)
      : warmup_(o.get_in<int64_t>("warmup", 0, 0, int64_t{1000000000}, "linear warmup steps")),
        decay_fraction_(o.get_in<double>("decay_fraction", 0.1, 0.0, 1.0,
                                         "fraction of train.steps spent decaying")),
        min_factor_(
            o.get_in<double>("min_factor", 0.0, 0.0, 1.0, "factor at the end of training")) {}

  float factor(int64_t step, int64_t total) const override {
    step = std::max<int64_t>(step, 0);
    const int64_t decay_steps = static_cast<int64_t>(
        std::llround(decay_fraction_ * static_cast<double>(std::max<int64_t>(total, 0))));
    const int64_t start = total - decay_steps;
    double f = 1.0;
    if (decay_steps > 0)
      f = 1.0 - (1.0 - min_factor_) *
                    std::clamp(static_cast<double>(step - start) / static_cast<double>(decay_steps),
                               0.0, 1.0);
    if (warmup_ > 0 && step < warmup_)
      f *= static_cast<double>(step + 1) / static_cast<double>(warmup_);
    return static_cast<float>(f);
  }

 private:
  int64_t warmup_;
  double decay_fraction_, min_factor_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Scheduler, wsd, Wsd,
              "warmup, constant, then linear decay over the last part (WSD)")
