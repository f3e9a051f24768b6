// The conformance suite of family "evaluator": metrics of a tiny model, named and repeatable.
#include "ablate/evaluator.hpp"
#include "ablate/model.hpp"
#include "ablate/tokenizer.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

// What the evaluator checks share: the variant, the first tokenizer of the plugin path and a
// tiny model (built by the first check).
struct EvaluatorCase {
  const Subject& s;
  const ModelDims d = small_dims();
  const std::string path = path_of(s.family);
  const PluginEntry* tokenizer_entry = nullptr;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Model> model;
  bool built = false;

  explicit EvaluatorCase(const Subject& subject) : s(subject) {}
  Built<Evaluator> evaluator() const { return build<Evaluator>(s.options, path, d); }
};

void builds_with_a_tiny_model(EvaluatorCase& c, std::string& note) {
  YAML::Node tn;
  tn["type"] = c.tokenizer_entry->info->name;
  auto t = build<Tokenizer>(tn, "tokenizer", c.d);
  t->fit(c.s.settings.sample_text.empty() ? builtin_sample_text() : c.s.settings.sample_text);
  c.model = std::make_unique<Model>(
      options_from_yaml("{d_model: 16, n_heads: 2, n_layers: 1, context: 32}", "model"),
      t->vocab_size(), 1);
  c.tok = std::move(t.obj);
  try {
    c.evaluator();
  } catch (const ConfigError& e) {
    throw Failure{std::string(e.what()) +
                  "\n(give the options it needs with --options '{key: value, ...}')"};
  }
  c.built = true;
  note = std::string("tokenizer '") + c.tokenizer_entry->info->name + "', " +
         std::to_string(c.model->n_params()) + " parameters";
}

void metrics_are_repeatable(EvaluatorCase& c, std::string& note) {
  auto e = c.evaluator();
  auto call = [&](bool final) {
    EvalContext ctx{*c.model, *c.tok, 10, final, 1, std::string(".")};
    return e->evaluate(ctx);
  };
  const auto r1 = call(false), r2 = call(false), r3 = call(true);
  expect(!r1.empty(), "no metrics");
  expect(r1.size() == r2.size() && r1.size() == r3.size(),
         "the number of columns changes between calls");
  for (size_t i = 0; i < r1.size(); ++i) {
    expect(!r1[i].first.empty(), "metric " + std::to_string(i) + " has no name");
    expect(r1[i].first == r2[i].first && r1[i].first == r3[i].first,
           "column " + std::to_string(i) + " changes name");
    const bool same =
        r1[i].second == r2[i].second || (std::isnan(r1[i].second) && std::isnan(r2[i].second));
    expect(same, "metric '" + r1[i].first + "' differs between two identical calls: " +
                     num(r1[i].second) + " vs " + num(r2[i].second));
  }
  expect_specs_fit(e->metric_specs(), r1);
  note = std::to_string(r1.size()) + " metrics, " + std::to_string(e->metric_specs().size()) +
         " declared (metric_specs)";
}

}  // namespace

void check_evaluator(Checker& ck, const Subject& s) {
  EvaluatorCase c(s);
  const auto toks = PluginRegistry::instance().variants(Tokenizer::kFamily);
  if (toks.empty()) {
    ck.run("a tokenizer to evaluate with",
           [](std::string&) { expect(false, "no tokenizer plugin found in the plugin path"); });
    return;
  }
  c.tokenizer_entry = toks.front();
  run_properties<EvaluatorCase>(
      ck, c,
      {{"builds with the given options; a tiny model to evaluate", &builds_with_a_tiny_model}});
  if (!c.built) return;
  run_properties<EvaluatorCase>(
      ck, c,
      {{"evaluate: named metrics, the same columns and values on repeated calls",
        &metrics_are_repeatable}});
  check_options<Evaluator>(ck, s, c.d);
}

}  // namespace ablate::conformance
