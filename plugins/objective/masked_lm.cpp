// Masked language modelling (an encoder, BERT; Devlin et al. 2019): each token is chosen
// with probability mask_rate (15%); a chosen token is replaced by the mask token with
// probability 80%, by a random token with 10%, and left as it is otherwise; the loss is
// the cross-entropy on the chosen positions only (Objective::loss's default, their sum and
// count: a step's loss is the mean over every chosen position of the step, however many
// each window or micro-batch has), and evaluations report the accuracy (arg-max = original
// token) on them. The mask token is one id added after the
// tokenizer's vocabulary (extra_tokens). Needs bidirectional attention: the context on
// both sides of a masked token is what it is predicted from.
#include <cmath>

#include "ablate/objective.hpp"
#include "ablate/plugin.hpp"

namespace {

class MaskedLm final : public ablate::Objective {
 public:
  MaskedLm(const ablate::Options& o, const ablate::BuildContext&)
      : rate_(o.get_in<float>("mask_rate", 0.15f, 1e-6f, 1.0f,
                              "fraction of tokens chosen for prediction")),
        to_mask_(o.get_in<float>("replace_mask", 0.8f, 0.0f, 1.0f,
                                 "of the chosen, the fraction replaced by the mask token")),
        to_random_(o.get_in<float>("replace_random", 0.1f, 0.0f, 1.0f,
                                   "of the chosen, the fraction replaced by a random token")) {
    if (to_mask_ + to_random_ > 1.0f)
      o.fail(
          "replace_random",
          "replace_mask + replace_random = " + std::to_string(to_mask_ + to_random_) +
              " exceeds 1 (the rest of the chosen tokens are left unchanged); lower one of them");
  }
  bool causal() const override { return false; }
  int64_t extra_tokens() const override { return 1; }
  bool generates() const override { return false; }

  void prepare(int32_t* x, int32_t* y, int64_t batch, int64_t time, int64_t vocab,
               ablate::Rng& rng) const override {
    const int64_t n = batch * time;
    int64_t chosen = 0;
    bool next_real =
        true;  // position i holds a token: the first of its window, or one that i-1 predicts
    for (int64_t i = 0; i < n; ++i) {
      const bool real = i % time == 0 || next_real;
      next_real = y[i] >= 0;
      y[i] = -1;
      if (real && rng.uniform() < rate_) chosen += choose(x, y, i, vocab, rng);
    }
    if (chosen == 0) choose(x, y, 0, vocab, rng);  // a batch scores at least one token
  }

  std::vector<std::pair<std::string, double>> metrics(const ablate::Tensor& logits,
                                                      const int32_t* y, int64_t n) const override {
    int64_t scored = 0, right = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (y[i] < 0) continue;
      const float* r = logits.row(i);
      int64_t best = 0;
      for (int64_t v = 1; v < logits.cols; ++v)
        if (r[v] > r[best]) best = v;
      ++scored;
      right += best == y[i];
    }
    return {{"accuracy", scored ? static_cast<double>(right) / static_cast<double>(scored) : 0.0}};
  }
  std::vector<ablate::MetricSpec> metric_specs() const override {
    return {{"accuracy", ablate::Better::higher, 0, 1}};
  }

 private:
  float rate_, to_mask_, to_random_;

  // Scores position i on its token and replaces the input by the 80/10/10 rule.
  int64_t choose(int32_t* x, int32_t* y, int64_t i, int64_t vocab, ablate::Rng& rng) const {
    y[i] = x[i];
    const float r = rng.uniform();
    if (r < to_mask_) x[i] = static_cast<int32_t>(vocab);  // the mask token
    else if (r < to_mask_ + to_random_)
      x[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
    return 1;
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Objective, masked_lm, MaskedLm,
              "BERT masked LM: 15% of tokens chosen (80% mask, 10% random, 10% kept), loss and "
              "accuracy on them")
