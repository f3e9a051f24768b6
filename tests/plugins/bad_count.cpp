// Test plugin: next-token prediction whose loss counts every position, padding included (a
// mean taken over the rows instead of the scored positions): `ablate plugin check` must fail
// its loss check, and a run with it must stop before its first update, naming both counts.
#include "ablate/objective.hpp"
#include "ablate/plugin.hpp"

namespace {

class BadCount final : public ablate::Objective {
 public:
  BadCount(const ablate::Options&, const ablate::BuildContext&) {}
  bool causal() const override { return true; }
  void prepare(int32_t*, int32_t*, int64_t, int64_t, int64_t, ablate::Rng&) const override {}
  ablate::LossSum loss(ablate::Graph& g, ablate::Var logits, const int32_t* y,
                       int64_t n) const override {
    ablate::LossSum l = ablate::cross_entropy_sum(g, logits, y, n);
    l.count = n;  // planted error: the unscored positions counted too
    return l;
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Objective, bad_count, BadCount,
              "next-token cross-entropy counting every position, padding too (a test fixture)")
