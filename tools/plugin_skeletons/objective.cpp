// my_objective: an objective for ablate (family "objective"), from `ablate plugin new objective my_objective`.
// As generated: position i, reading tokens 0..i, predicts token i + ahead (ahead: 1 is
// next_token; 2 and more are the far targets of multi-token prediction, Gloeckle et al.
// 2024). Causal: it must not see what it predicts, so the trainer pairs it with a causal
// attention. prepare() turns windows into inputs and targets; loss() (the sum of the scored
// positions' cross-entropies and their count, which the trainer divides once per step) and
// metrics() default to cross-entropy and nothing else.
#include <string>

#include "ablate/objective.hpp"
#include "ablate/plugin.hpp"

namespace {

class MyObjective final : public ablate::Objective {
 public:
  MyObjective(const ablate::Options& o, const ablate::BuildContext&)
      : ahead_(o.get_in<int64_t>("ahead", 2, 1, 1 << 20, "how many tokens ahead each position predicts")) {}
  bool causal() const override { return true; }

  // y[t] is token t+1 of the window, so token t+ahead is y[t+ahead-1]; later ones are -1.
  void prepare(int32_t*, int32_t* y, int64_t batch, int64_t time, int64_t, ablate::Rng&) const override {
    ABLATE_CHECK(ahead_ <= time, "objective.ahead = ", ahead_, " reaches past the context of ", time,
                 " tokens; lower it below model.context");
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < time; ++t) {
        int32_t* row = y + b * time;
        row[t] = t + ahead_ - 1 < time ? row[t + ahead_ - 1] : -1;
      }
  }

 private:
  int64_t ahead_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Objective, my_objective, MyObjective, "predicts the token `ahead` positions later (causal)")
