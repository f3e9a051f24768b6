// Test plugin: an evaluator that reports what its EvalContext holds (the run's data split, the
// vocabulary, the experiment's directory), for the test that the trainer passes them; and a
// metric_specs range its column breaks, for the conformance check of declared ranges.
#include <filesystem>

#include "ablate/data.hpp"
#include "ablate/evaluator.hpp"
#include "ablate/plugin.hpp"

namespace {

class ContextProbe final : public ablate::Evaluator {
 public:
  ContextProbe(const ablate::Options&, const ablate::BuildContext&) {}
  std::vector<std::pair<std::string, double>> evaluate(ablate::EvalContext& ctx) override {
    const ablate::TextData* d = ctx.data;
    return {
        {"has_data", d ? 1.0 : 0.0},
        {"train_ids", d ? static_cast<double>(d->train.size()) : -1.0},
        {"val_ids", d ? static_cast<double>(d->val.size()) : -1.0},
        {"train_chars", d ? static_cast<double>(d->train_text.size()) : -1.0},
        {"val_chars", d ? static_cast<double>(d->val_text.size()) : -1.0},
        {"vocab", static_cast<double>(ctx.tokenizer.vocab_size())},
        {"dir_has_experiment",
         std::filesystem::exists(std::filesystem::path(ctx.yaml_dir) / "tiny.yaml") ? 1.0 : 0.0}};
  }
  // Declared wrong on purpose: the vocabulary's size is no proportion (the conformance check
  // of declared ranges must fail on it).
  std::vector<ablate::MetricSpec> metric_specs() const override {
    return {{"vocab", ablate::Better::higher, 0, 1}};
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Evaluator, context_probe, ContextProbe, "test: what an evaluator is given")
