// Family "objective": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new objective NAME`; its conformance checks are in conformance/objective.cpp.
#include "ablate/objective.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

const char* kTemplate =
    R"TPL(// @NAME@: an objective for ablate (family "objective"), from `ablate plugin new objective @NAME@`.
// As generated: position i, reading tokens 0..i, predicts token i + ahead (ahead: 1 is
// next_token; 2 and more are the far targets of multi-token prediction, Gloeckle et al.
// 2024). Causal: it must not see what it predicts, so the trainer pairs it with a causal
// attention. prepare() turns windows into inputs and targets; loss() and metrics() default
// to cross-entropy and nothing else.
#include <string>

#include "ablate/objective.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Objective {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : ahead_(o.get_in<int64_t>("ahead", 2, 1, 1 << 20, "how many tokens ahead each position predicts")) {}
  bool causal() const override { return true; }

  // y[t] is token t+1 of the window, so token t+ahead is y[t+ahead-1]; later ones are -1.
  void prepare(int32_t*, int32_t* y, int64_t batch, int64_t time, int64_t, ablate::Rng&) const override {
    if (ahead_ > time)
      throw ablate::Error("objective." + std::string("ahead = ") + std::to_string(ahead_) + " reaches past the context of " +
                          std::to_string(time) + " tokens; lower it below model.context");
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
ABLATE_PLUGIN(ablate::Objective, @NAME@, @CLASS@, "predicts the token `ahead` positions later (causal)")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Objective::kFamily;
  d.key = "objective";
  d.list = false;
  d.default_variant = "next_token";
  d.summary =
      "what the model learns to predict: inputs and targets from windows of text, the loss, "
      "evaluation metrics";
  d.checks = &conformance::check_objective;
  d.template_summary = "predicts the token `ahead` positions later (causal)";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate
