// Family "evaluator": its descriptor (see ablate/family.hpp), conformance checks and the
// skeleton of `ablate plugin new evaluator NAME`.
#include "ablate/evaluator.hpp"
#include "ablate/model.hpp"
#include "ablate/tokenizer.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

// ---- evaluator -----------------------------------------------------------------------------

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

const char* kTemplate =
    R"TPL(// @NAME@: an evaluator for ablate (family "evaluator"), from `ablate plugin new evaluator @NAME@`.
// Chosen in an experiment's `eval:` list; its metrics go to the run file's table
// "eval/@NAME@" at every evaluation. As generated: the model's loss on a fixed text.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/evaluator.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Evaluator {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : text_(o.get<std::string>("text", "ROMEO:\nBut, soft! what light through yonder window breaks?\n", "the text scored")) {
    if (!o.describing() && text_.size() < 2) o.fail("text", "needs at least two characters to predict one from the other");
  }

  std::vector<std::pair<std::string, double>> evaluate(ablate::EvalContext& ctx) override {
    const std::vector<int32_t> ids = ctx.tokenizer.encode(text_);
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()) - 1, ctx.model.dims().context);
    if (T < 1) throw ablate::Error("@NAME@: the text encodes to fewer than two tokens; give a longer eval text");
    ablate::Graph g;
    ablate::NoGrad no_grad(g);
    ablate::ForwardArgs a;
    a.ids = ids.data();
    a.batch = 1;
    a.time = T;
    ablate::Var loss = ablate::cross_entropy(g, ctx.model.forward(g, a), ids.data() + 1, T);  // next-token targets
    const double l = g.value(loss).data[0];
    return {{"loss", l}, {"ppl", std::exp(l)}};
  }

  // Which way each column is better and its range: run.h5 records it for `ablate compare`.
  std::vector<ablate::MetricSpec> metric_specs() const override {
    return {{"loss", ablate::Better::lower, 0}, {"ppl", ablate::Better::lower, 1}};
  }

 private:
  std::string text_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Evaluator, @NAME@, @CLASS@, "the model's loss on a fixed text")
)TPL";

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Evaluator::kFamily;
  d.key = "eval";
  d.list = true;
  d.default_variant = "";
  d.summary = "metrics beside the loss at every evaluation";
  d.checks = &check_evaluator;
  d.template_summary = "the model's loss on a fixed text";
  d.template_source = kTemplate;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
