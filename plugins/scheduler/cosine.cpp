// Cosine decay with linear warmup and a floor, as the GPT-2 recipe (REFERENCE.md item 5):
// f = 0.5 * (1 + cos(pi * step / total)), times (step + 1) / warmup during warmup, never
// below min_factor. Warmup counts updates from 1 so that the first update is not lost.
#include <algorithm>
#include <cmath>

#include "ablate/plugin.hpp"
#include "ablate/scheduler.hpp"

namespace {

constexpr double kPi = 3.14159265358979323846;

class Cosine final : public ablate::Scheduler {
 public:
  Cosine(const ablate::Options& o, const ablate::BuildContext&)
      : warmup_(o.get_in<int64_t>("warmup", 0, 0, int64_t{1000000000},
                                  "linear warmup steps (GPT-2 recipe: 2000)")),
        min_factor_(o.get_in<double>("min_factor", 0.1, 0.0, 1.0,
                                     "floor of the factor (everywhere, warmup included)")) {}

  float factor(int64_t step, int64_t total) const override {
    step = std::max<int64_t>(step, 0);
    const double progress =
        total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0)
                  : 0.0;
    double f = 0.5 * (1.0 + std::cos(kPi * progress));
    if (warmup_ > 0 && step < warmup_)
      f *= static_cast<double>(step + 1) / static_cast<double>(warmup_);
    return static_cast<float>(std::max(f, min_factor_));
  }

 private:
  int64_t warmup_;
  double min_factor_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Scheduler, cosine, Cosine,
              "cosine decay with linear warmup and a floor (GPT-2 recipe)")
