// Value embeddings (modded-nanogpt, nanochat): a learned table per layer that adds a vector
// of the current token to its values, v <- v + E[id], so that attention can move a token's
// own identity without spending the residual stream on it. E is (vocab, d_model), an
// embedding by role (model.init sets it); with grouped-query heads the first n_kv_heads *
// head_size columns are used. With qk_norm: true, q and k are also RMS-normalised per head
// with learned gains (QK-norm, as the qk_norm transform), so the two combine in one attention.
#include <string>

#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/qk_transform.hpp"

namespace {

class ValueEmbed final : public ablate::QkTransform {
 public:
  ValueEmbed(const ablate::Options& o, const ablate::BuildContext& c) {
    const bool qk_norm = o.get<bool>(
        "qk_norm", false, "also RMS-normalise each head of q and k, with learned gains (QK-norm)");
    eps_ = o.get_in<float>("eps", 1e-6f, 1e-12f, 1.0f, "QK-norm: added to a head's mean square");
    C_ = c.dims.d_model;
    if (C_ <= 0 || c.dims.n_heads <= 0 || C_ % c.dims.n_heads != 0 || c.dims.vocab_size <= 0)
      o.fail("", "needs a vocabulary and n_heads dividing d_model, got vocab " +
                     std::to_string(c.dims.vocab_size) + ", d_model " + std::to_string(C_) +
                     ", n_heads " + std::to_string(c.dims.n_heads));
    HS_ = C_ / c.dims.n_heads;
    ablate::ParamScope ps = c.params;
    table_ = &ps.add("value_embed.weight", c.dims.vocab_size, C_, ablate::Role::kEmbedding);
    if (qk_norm) {
      gq_ = &ps.add("q_norm.weight", 1, HS_, ablate::Role::kGain);
      gk_ = &ps.add("k_norm.weight", 1, HS_, ablate::Role::kGain);
    }
  }

  bool transforms() const override { return true; }

  void apply(ablate::Graph& g, ablate::Var& q, ablate::Var& k, ablate::Var& v,
             const ablate::QkvHeads& h) override {
    if (!h.batch.ids)
      throw ablate::Error(
          "value_embed: needs the token ids of the input (a probe without "
          "tokens cannot run it)");
    const int64_t rows = h.batch.rows(), width = h.n_kv_heads * h.head_size;
    ablate::Var e = ablate::embedding(g, g.param(*table_), h.batch.ids, rows);  // (rows, C)
    if (width < C_) e = ablate::slice_cols(g, e, 0, width);
    v = ablate::add(g, v, e);
    if (gq_) {
      q = ablate::rmsnorm_groups(g, q, HS_, g.param(*gq_), eps_);
      k = ablate::rmsnorm_groups(g, k, HS_, g.param(*gk_), eps_);
    }
  }

 private:
  float eps_ = 1e-6f;
  int64_t C_ = 0, HS_ = 0;
  ablate::Parameter *table_ = nullptr, *gq_ = nullptr, *gk_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::QkTransform, value_embed, ValueEmbed,
              "value embeddings: a per-layer table of the token added to v (modded-nanogpt); "
              "qk_norm: true adds QK-norm")
