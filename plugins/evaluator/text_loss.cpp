// text_loss: the model's loss, perplexity and bits per byte on a fixed text given in the
// experiment,
//   eval: [{type: text_loss, text: "ROMEO: ..."}]  -> table eval/text_loss
// The smallest evaluator: the skeleton `ablate plugin new evaluator NAME` writes is this one
// without bits per byte.
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

class TextLoss final : public ablate::Evaluator {
 public:
  TextLoss(const ablate::Options& o, const ablate::BuildContext&)
      : text_(o.get<std::string>("text",
                                 "ROMEO:\nBut, soft! what light through yonder window breaks?\n",
                                 "the text scored")) {
    if (!o.describing() && text_.size() < 2)
      o.fail("text", "needs at least two characters to predict one from the other");
  }

  std::vector<std::pair<std::string, double>> evaluate(ablate::EvalContext& ctx) override {
    const std::vector<int32_t> ids = ctx.tokenizer.encode(text_);
    const int64_t T =
        std::min<int64_t>(static_cast<int64_t>(ids.size()) - 1, ctx.model.dims().context);
    if (T < 1)
      throw ablate::Error(
          "text_loss: the text encodes to fewer than two tokens; give a longer eval text");
    ablate::Graph g;
    ablate::NoGrad no_grad(g);
    ablate::Batch a;
    a.ids = ids.data();
    a.batch = 1;
    a.time = T;
    ablate::Var logits = ctx.model.forward(g, a);
    ablate::Var loss = ablate::cross_entropy(g, logits, ids.data() + 1, T);  // next-token targets
    const double l = g.value(loss).data[0];
    if (!ctx.token_bytes && token_bytes_.empty())
      token_bytes_ = ablate::token_byte_counts(ctx.tokenizer);
    const ablate::ByteLoss b = ablate::byte_loss(g.value(logits), ids.data() + 1, T, l,
                                                 ctx.token_bytes ? *ctx.token_bytes : token_bytes_);
    return {{"loss", l}, {"ppl", std::exp(l)}, {"bpb", b.bpb()}};
  }
  std::vector<ablate::MetricSpec> metric_specs() const override {
    return {{"loss", ablate::Better::lower, 0},
            {"ppl", ablate::Better::lower, 1},
            {"bpb", ablate::Better::lower, 0}};
  }

 private:
  std::string text_;
  std::vector<int32_t> token_bytes_;  // when the caller gives none
};

}  // namespace
ABLATE_PLUGIN(ablate::Evaluator, text_loss, TextLoss,
              "the model's loss, perplexity and bits per byte on a fixed text")
