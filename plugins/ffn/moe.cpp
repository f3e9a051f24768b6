// Sparse mixture-of-experts FFN (Shazeer et al. 2017; Switch Transformer, Fedus et al. 2021;
// Mixtral, Jiang et al. 2024): a router picks top_k of `experts` two-layer FFNs per token,
// and each token runs only through the experts it picked (dropless: no capacity limit, no
// token dropped), its output the routing-weighted sum of theirs.
//   logits = x Wr (N, E); chosen = top_k(logits); w = softmax(chosen logits) (Mixtral, the
//   default for top_k > 1), or the chosen entries of softmax(logits) (normalize: false; Switch,
//   the default for top_k 1);
//   y[n] = sum over chosen e of w[n, e] * (act(x[n] W1_e + b1_e) W2_e + b2_e).
// The load-balancing loss of Switch, E * sum_e f_e P_e (f_e: the share of the routing
// choices that went to expert e, P_e: the mean router probability of e; 1 when balanced),
// goes into the training loss at balance_weight (Graph::add_aux, logged as aux_moe_balance),
// and aux_moe_max_load logs the busiest expert's share times E (1 when balanced).
#include <algorithm>
#include <string>
#include <vector>

#include "ablate/ffn.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

using ablate::Graph;
using ablate::Var;

class Moe final : public ablate::Ffn {
 public:
  Moe(const ablate::Options& o, const ablate::BuildContext& c) : layer_(c.dims.layer) {
    const int64_t C = c.dims.d_model;
    if (C <= 0) o.fail("", "d_model must be positive, got " + std::to_string(C));
    E_ = o.get_in<int64_t>("experts", 4, 2, 1024, "number of experts E");
    k_ = o.get_in<int64_t>("top_k", 2, 1, 1024, "experts per token (at most `experts`)");
    if (k_ > E_)
      o.fail("top_k", "top_k " + std::to_string(k_) + " is larger than experts " +
                          std::to_string(E_) +
                          ": a token cannot pick more experts than there "
                          "are; lower top_k or raise experts");
    const int64_t hidden =
        o.get_in<int64_t>("hidden", 0, 0, int64_t{1} << 24,
                          "each expert's hidden width; 0 = ffn_multiplier * d_model");
    H_ = hidden > 0 ? hidden : c.dims.ffn_multiplier * C;
    // With one expert per token, softmax over the chosen logit is 1: the LM loss would not
    // reach the router, which would learn from the balancing loss alone.
    normalize_ = o.get<bool>("normalize", k_ > 1,
                             "weights: softmax over the chosen logits (Mixtral; the default for "
                             "top_k > 1); false: the chosen router probabilities as they are "
                             "(Switch; the default for top_k 1)");
    if (normalize_ && k_ == 1)
      o.fail("normalize",
             "normalize: true with top_k 1 gives every token the weight 1, so the "
             "language-model loss never reaches the router; leave normalize out "
             "(false for top_k 1, as in Switch) or raise top_k");
    balance_ = o.get_in<float>("balance_weight", 0.01f, 0.0f, 100.0f,
                               "weight of the load-balancing loss in the training loss (Switch: "
                               "0.01); 0 logs it without training on it");
    act_ = o.get_choice("activation", "relu", {"relu", "gelu", "silu", "relu2"},
                        "each expert's activation (relu2: relu squared)");
    const bool bias =
        o.get<bool>("bias", c.dims.bias, "biases in the experts (default: model.bias)");
    ablate::ParamScope ps = c.params;
    router_ = &ps.add("router.weight", C, E_, ablate::Role::kHidden);
    experts_.resize(static_cast<size_t>(E_));
    for (int64_t e = 0; e < E_; ++e) {
      ablate::ParamScope es = ps.sub("experts." + std::to_string(e));
      Expert& x = experts_[static_cast<size_t>(e)];
      x.w1 = &es.add("up.weight", C, H_, ablate::Role::kHidden);
      if (bias) x.b1 = &es.add("up.bias", 1, H_, ablate::Role::kBias);
      x.w2 = &es.add("down.weight", H_, C, ablate::Role::kResidualOut);
      if (bias) x.b2 = &es.add("down.bias", 1, C, ablate::Role::kBias);
    }
  }

  Var forward(Graph& g, Var x) override {
    const int64_t N = g.value(x).rows;
    g.tape_depends_on_data();  // the experts no token chose make no nodes
    Var logits = ablate::linear(g, x, g.param(*router_));  // (N, E)
    Var probs = ablate::softmax(g, logits);
    ablate::TopK t = normalize_ ? ablate::top_k(g, logits, k_) : ablate::top_k(g, probs, k_);
    Var w = normalize_ ? ablate::softmax(g, t.values) : t.values;  // (N, k)
    Var w_flat = ablate::reshape(g, w, N * k_, 1);                 // choice n * k + j
    // Dispatch: each expert's tokens (rows of x) and their choices (rows of w_flat), in
    // token order.
    rows_.resize(static_cast<size_t>(E_));
    choices_.resize(static_cast<size_t>(E_));
    for (int64_t e = 0; e < E_; ++e) {  // kept capacity: a steady step allocates nothing here
      rows_[static_cast<size_t>(e)].clear();
      choices_[static_cast<size_t>(e)].clear();
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < k_; ++j) {
        const int32_t e = t.indices[n * k_ + j];
        rows_[static_cast<size_t>(e)].push_back(static_cast<int32_t>(n));
        choices_[static_cast<size_t>(e)].push_back(static_cast<int32_t>(n * k_ + j));
      }
    Var y;
    for (int64_t e = 0; e < E_; ++e) {
      const auto& rows = rows_[static_cast<size_t>(e)];
      if (rows.empty()) continue;  // no token chose it: it takes no part in this batch
      const auto m = static_cast<int64_t>(rows.size());
      const Expert& ex = experts_[static_cast<size_t>(e)];
      Var h = ablate::linear(g, ablate::gather_rows(g, x, rows.data(), m), g.param(*ex.w1),
                             maybe(g, ex.b1));
      h = activation(g, h);
      Var out = ablate::linear(g, h, g.param(*ex.w2), maybe(g, ex.b2));  // (m, C)
      out = ablate::scale_rows(
          g, out, ablate::gather_rows(g, w_flat, choices_[static_cast<size_t>(e)].data(), m));
      out = ablate::scatter_add_rows(g, out, rows.data(), N);  // (N, C)
      y = y.valid() ? ablate::add(g, y, out) : out;
    }
    add_balance_terms(g, probs, N);
    return y;
  }

 private:
  struct Expert {
    ablate::Parameter *w1 = nullptr, *b1 = nullptr, *w2 = nullptr, *b2 = nullptr;
  };

  static Var maybe(Graph& g, ablate::Parameter* p) { return p ? g.param(*p) : Var{}; }

  Var activation(Graph& g, Var h) const {
    if (act_ == "gelu") return ablate::gelu(g, h);
    if (act_ == "silu") return ablate::silu(g, h);
    h = ablate::relu(g, h);
    return act_ == "relu2" ? ablate::mul(g, h, h) : h;
  }

  // E * sum_e f_e P_e: f (the routing choices' shares) is a constant of the step, P the
  // column means of the router's probabilities, so the gradient reaches the router alone.
  void add_balance_terms(Graph& g, Var probs, int64_t N) {
    f_.resize(static_cast<size_t>(E_));  // scratch kept across steps
    float busiest = 0;
    for (int64_t e = 0; e < E_; ++e) {
      const float share =
          static_cast<float>(rows_[static_cast<size_t>(e)].size()) / static_cast<float>(N * k_);
      f_[static_cast<size_t>(e)] = static_cast<float>(E_) * share;
      busiest = std::max(busiest, share);
    }
    mean_row_.assign(static_cast<size_t>(N), 1.0f / static_cast<float>(N));
    Var P = ablate::matmul(g, g.constant(mean_row_.data(), 1, N), probs);  // (1, E)
    Var balance = ablate::sum(g, ablate::mul(g, P, g.constant(f_.data(), 1, E_)));
    g.add_aux("moe_balance", balance, balance_, layer_);
    const float load = busiest * static_cast<float>(E_);
    g.add_aux("moe_max_load", g.constant(&load, 1, 1), 0.0f, layer_);
  }

  int64_t layer_ = -1, E_ = 0, k_ = 0, H_ = 0;
  bool normalize_ = true;
  float balance_ = 0.01f;
  std::string act_;
  ablate::Parameter* router_ = nullptr;
  std::vector<Expert> experts_;
  std::vector<std::vector<int32_t>> rows_, choices_;  // per expert: tokens, choices (scratch)
  std::vector<float> f_, mean_row_;                   // the balancing loss's constants (scratch)
};

}  // namespace
ABLATE_PLUGIN(ablate::Ffn, moe, Moe,
              "sparse mixture of experts: top-k routing, dropless, load-balancing loss (Switch, "
              "Mixtral)")
