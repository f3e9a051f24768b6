// Conformance of every "scheduler" variant (finite factors in [0, 1] over whole runs,
// options), plus known factors of each schedule, cosine as REFERENCE.md item 5.
#include <doctest/doctest.h>

#include "ablate/scheduler.hpp"
#include "plugin_test_util.hpp"

using ablate::Scheduler;

namespace {

ptest::Built<Scheduler> make(const std::string& yaml) {
  return ptest::build<Scheduler>(yaml, ptest::dims(), 7, "train.scheduler");
}

}  // namespace

TEST_CASE("scheduler/conformance: every variant gives finite factors in [0, 1] over a run") {
  ptest::check_conformance("scheduler");
}

TEST_CASE("scheduler/cosine: GPT-2 recipe, warmup 2000 of 60000 steps, floor 0.1") {
  auto s = make("{type: cosine, warmup: 2000, min_factor: 0.1}");
  const int64_t N = 60000;
  // 0.5 * (1 + cos(pi * step / N)), times (step + 1) / 2000 in warmup, floored at 0.1.
  CHECK(s->factor(0, N) == doctest::Approx(0.1));    // 1/2000, floored
  CHECK(s->factor(199, N) == doctest::Approx(0.1));  // 0.09999, floored
  CHECK(s->factor(999, N) == doctest::Approx(0.4996580684).epsilon(1e-6));
  CHECK(s->factor(1999, N) == doctest::Approx(0.9972636836).epsilon(1e-6));
  CHECK(s->factor(2000, N) == doctest::Approx(0.9972609477).epsilon(1e-6));
  CHECK(s->factor(30000, N) == doctest::Approx(0.5).epsilon(1e-6));
  CHECK(s->factor(54000, N) == doctest::Approx(0.1));  // 0.0245, floored
  CHECK(s->factor(70000, N) == doctest::Approx(0.1));
  // Without warmup or floor: 1 at the start, 0 at the end; the first update is never lost.
  auto plain = make("{type: cosine, min_factor: 0}");
  CHECK(plain->factor(0, 100) == doctest::Approx(1.0));
  CHECK(plain->factor(100, 100) == doctest::Approx(0.0).scale(1));
  CHECK(make("{type: cosine, warmup: 10, min_factor: 0}")->factor(0, 100) > 0.0f);
}

TEST_CASE("scheduler/linear, inverse_sqrt, wsd, constant: known factors") {
  auto lin = make("{type: linear, warmup: 10}");
  CHECK(lin->factor(4, 110) == doctest::Approx(0.5));
  CHECK(lin->factor(9, 110) == doctest::Approx(1.0));
  CHECK(lin->factor(60, 110) == doctest::Approx(0.5));
  CHECK(lin->factor(110, 110) == doctest::Approx(0.0).scale(1));
  CHECK(make("{type: linear, min_factor: 0.2}")->factor(100, 100) == doctest::Approx(0.2));

  auto isq = make("{type: inverse_sqrt, warmup: 100}");
  CHECK(isq->factor(49, 1000) == doctest::Approx(0.5));
  CHECK(isq->factor(99, 1000) == doctest::Approx(1.0));
  CHECK(isq->factor(399, 1000) == doctest::Approx(0.5));

  auto wsd = make("{type: wsd, warmup: 10, decay_fraction: 0.2}");
  CHECK(wsd->factor(4, 100) == doctest::Approx(0.5));
  CHECK(wsd->factor(50, 100) == doctest::Approx(1.0));
  CHECK(wsd->factor(80, 100) == doctest::Approx(1.0));
  CHECK(wsd->factor(90, 100) == doctest::Approx(0.5));
  CHECK(wsd->factor(100, 100) == doctest::Approx(0.0).scale(1));

  auto c = make("{type: constant}");
  CHECK(c->factor(0, 10) == 1.0f);
  CHECK(c->factor(1000, 10) == 1.0f);
}
