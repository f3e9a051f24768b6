// The conformance suite of family "evaluator": metrics of a tiny model, named and repeatable.
#include "ablate/evaluator.hpp"
#include "ablate/model.hpp"
#include "ablate/tokenizer.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {}  // namespace

void check_evaluator(Checker& ck, const Subject& s) {
  const ModelDims d = small_dims();
  const std::string path = path_of(s.family);
  auto& reg = PluginRegistry::instance();
  auto toks = reg.variants(Tokenizer::kFamily);
  if (toks.empty()) {
    ck.run("a tokenizer to evaluate with",
           [](std::string&) { expect(false, "no tokenizer plugin found in the plugin path"); });
    return;
  }
  YAML::Node tn;
  tn["type"] = toks.front()->info->name;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Model> model;
  bool built = false;
  ck.run("builds with the given options; a tiny model to evaluate", [&](std::string& note) {
    auto t = build<Tokenizer>(tn, "tokenizer", d);
    t->fit(s.settings.sample_text.empty() ? builtin_sample_text() : s.settings.sample_text);
    model = std::make_unique<Model>(
        options_from_yaml("{d_model: 16, n_heads: 2, n_layers: 1, context: 32}", "model"),
        t->vocab_size(), 1);
    tok = std::move(t.obj);
    try {
      build<Evaluator>(s.options, path, d);
    } catch (const ConfigError& e) {
      throw Failure{std::string(e.what()) +
                    "\n(give the options it needs with --options '{key: value, ...}')"};
    }
    built = true;
    note = std::string("tokenizer '") + toks.front()->info->name + "', " +
           std::to_string(model->n_params()) + " parameters";
  });
  if (!built) return;
  ck.run("evaluate: named metrics, the same columns and values on repeated calls",
         [&](std::string& note) {
           auto e = build<Evaluator>(s.options, path, d);
           auto call = [&](bool final) {
             EvalContext ctx{*model, *tok, 10, final, 1, std::string(".")};
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
             const bool same = r1[i].second == r2[i].second ||
                               (std::isnan(r1[i].second) && std::isnan(r2[i].second));
             expect(same, "metric '" + r1[i].first + "' differs between two identical calls: " +
                              num(r1[i].second) + " vs " + num(r2[i].second));
           }
           expect_specs_fit(e->metric_specs(), r1);
           note = std::to_string(r1.size()) + " metrics, " +
                  std::to_string(e->metric_specs().size()) + " declared (metric_specs)";
         });
  check_options<Evaluator>(ck, s, d);
}

}  // namespace ablate::conformance
