// Test plugin: next-token prediction that refuses to be built without the tokenizer's
// vocabulary in its BuildContext (dims.vocab_size and each id's text), for the test that the
// trainer gives it.
#include <string>

#include "ablate/error.hpp"
#include "ablate/objective.hpp"
#include "ablate/plugin.hpp"

namespace {

class VocabObjective final : public ablate::Objective {
 public:
  VocabObjective(const ablate::Options&, const ablate::BuildContext& c) {
    if (!c.vocab || c.dims.vocab_size <= 0 ||
        static_cast<int64_t>(c.vocab->size()) != c.dims.vocab_size)
      throw ablate::Error("vocab_objective: no vocabulary in the BuildContext");
    if (c.vocab->at(static_cast<size_t>(c.dims.vocab_size - 1)).empty())
      throw ablate::Error("vocab_objective: the last token has no text");
  }
  bool causal() const override { return true; }
  void prepare(int32_t*, int32_t*, int64_t, int64_t, int64_t, ablate::Rng&) const override {}
};

}  // namespace
ABLATE_PLUGIN(ablate::Objective, vocab_objective, VocabObjective,
              "test: next token, needs the vocabulary")
