// Inverse square root schedule (Vaswani et al. 2017; fairseq's inverse_sqrt): with t = step + 1,
// factor t / warmup while t < warmup, then sqrt(warmup / t). Peaks at 1 when t = warmup.
#include <algorithm>
#include <cmath>

#include "ablate/plugin.hpp"
#include "ablate/scheduler.hpp"

namespace {

class InverseSqrt final : public ablate::Scheduler {
 public:
  InverseSqrt(const ablate::Options& o, const ablate::BuildContext&)
      : warmup_(o.get_in<int64_t>("warmup", 100, 1, int64_t{1000000000},
                                  "warmup steps; the factor is 1 at the end of warmup")) {}

  float factor(int64_t step, int64_t) const override {
    const double t = static_cast<double>(std::max<int64_t>(step, 0) + 1),
                 w = static_cast<double>(warmup_);
    return static_cast<float>(t < w ? t / w : std::sqrt(w / t));
  }

 private:
  int64_t warmup_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Scheduler, inverse_sqrt, InverseSqrt, "linear warmup then 1/sqrt(step) decay")
