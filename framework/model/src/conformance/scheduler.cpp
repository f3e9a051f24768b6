// The conformance suite of family "scheduler": the learning-rate factor over runs of any length.
#include "ablate/scheduler.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

// What the scheduler checks share: the variant.
struct SchedulerCase {
  const Subject& s;
  const ModelDims d = small_dims();
  const std::string path = path_of(s.family);
  Built<Scheduler> scheduler() const { return build<Scheduler>(s.options, path, d); }
};

void factors_lie_in_unit_range(SchedulerCase& c, std::string&) {
  auto sc = c.scheduler();
  for (int64_t total : {1, 2, 10, 1000, 60000}) {
    const int64_t stride = std::max<int64_t>(1, total / 500);
    for (int64_t step = 0; step <= total + 10; step += stride) {
      const float f = sc->factor(step, total);
      expect(std::isfinite(f) && f >= 0.0f && f <= 1.0001f,
             "factor(" + std::to_string(step) + ", " + std::to_string(total) + ") = " + num(f));
    }
    expect(sc->factor(total / 2, total) > 0.0f,
           "factor is 0 half way through a run of " + std::to_string(total) + " steps");
  }
}

void is_deterministic(SchedulerCase& c, std::string&) {
  auto a = c.scheduler(), b = c.scheduler();
  for (int64_t step = 0; step <= 1000; step += 7)
    expect(a->factor(step, 1000) == b->factor(step, 1000),
           "factor(" + std::to_string(step) + ", 1000) differs");
}

}  // namespace

void check_scheduler(Checker& ck, const Subject& s) {
  SchedulerCase c{s};
  run_properties<SchedulerCase>(
      ck, c,
      {{"factors finite and in [0, 1] over runs of 1 to 60000 steps; positive mid-run",
        &factors_lie_in_unit_range},
       {"deterministic: two instances give the same factors", &is_deterministic}});
  check_options<Scheduler>(ck, s, c.d);
}

}  // namespace ablate::conformance
