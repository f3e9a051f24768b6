// my_evaluator: an evaluator for ablate (family "evaluator"), from `ablate plugin new evaluator my_evaluator`.
// Chosen in an experiment's `eval:` list; its metrics go to the run file's table
// "eval/my_evaluator" at every evaluation. As generated: the model's loss on a fixed text.
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

class MyEvaluator final : public ablate::Evaluator {
 public:
  MyEvaluator(const ablate::Options& o, const ablate::BuildContext&)
      : text_(o.get<std::string>("text", "ROMEO:\nBut, soft! what light through yonder window breaks?\n", "the text scored")) {
    if (!o.describing() && text_.size() < 2) o.fail("text", "needs at least two characters to predict one from the other");
  }

  std::vector<std::pair<std::string, double>> evaluate(ablate::EvalContext& ctx) override {
    const std::vector<int32_t> ids = ctx.tokenizer.encode(text_);
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()) - 1, ctx.model.dims().context);
    if (T < 1) throw ablate::Error("my_evaluator: the text encodes to fewer than two tokens; give a longer eval text");
    ablate::Graph g;
    ablate::NoGrad no_grad(g);
    ablate::Batch a;
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
ABLATE_PLUGIN(ablate::Evaluator, my_evaluator, MyEvaluator, "the model's loss on a fixed text")
