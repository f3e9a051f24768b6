// Next-token prediction (a decoder, GPT): position i reads tokens 0..i and is scored on
// token i+1 by cross-entropy, every position of the window. Needs causal attention: with
// a bidirectional one position i sees token i+1, the answer (the loss falls towards 0 and
// sampled text is garbage), so the trainer refuses that combination.
#include "ablate/objective.hpp"
#include "ablate/plugin.hpp"

namespace {

class NextToken final : public ablate::Objective {
 public:
  NextToken(const ablate::Options&, const ablate::BuildContext&) {}
  bool causal() const override { return true; }
  // The windows are inputs and next tokens already.
  void prepare(int32_t*, int32_t*, int64_t, int64_t, int64_t, ablate::Rng&) const override {}
};

}  // namespace
ABLATE_PLUGIN(ablate::Objective, next_token, NextToken,
              "next-token cross-entropy on every position (decoder, causal attention)")
