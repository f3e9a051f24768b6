// Family "scheduler": its descriptor (see ablate/family.hpp), conformance checks and the
// skeleton of `ablate plugin new scheduler NAME`.
#include "ablate/scheduler.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

// ---- scheduler -----------------------------------------------------------------------------

void check_scheduler(Checker& ck, const Subject& s) {
  const ModelDims d = small_dims();
  const std::string path = path_of(s.family);
  ck.run("factors finite and in [0, 1] over runs of 1 to 60000 steps; positive mid-run",
         [&](std::string&) {
           auto sc = build<Scheduler>(s.options, path, d);
           for (int64_t total : {1, 2, 10, 1000, 60000}) {
             const int64_t stride = std::max<int64_t>(1, total / 500);
             for (int64_t step = 0; step <= total + 10; step += stride) {
               const float f = sc->factor(step, total);
               expect(std::isfinite(f) && f >= 0.0f && f <= 1.0001f,
                      "factor(" + std::to_string(step) + ", " + std::to_string(total) +
                          ") = " + num(f));
             }
             expect(sc->factor(total / 2, total) > 0.0f,
                    "factor is 0 half way through a run of " + std::to_string(total) + " steps");
           }
         });
  ck.run("deterministic: two instances give the same factors", [&](std::string&) {
    auto a = build<Scheduler>(s.options, path, d), b = build<Scheduler>(s.options, path, d);
    for (int64_t step = 0; step <= 1000; step += 7)
      expect(a->factor(step, 1000) == b->factor(step, 1000),
             "factor(" + std::to_string(step) + ", 1000) differs");
  });
  check_options<Scheduler>(ck, s, d);
}

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
  d.checks = &check_scheduler;
  d.template_summary = "linear warmup then exponential decay";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
