// GPT assembly from plugins (see model.hpp).
#include "ablate/model.hpp"

#include "ablate/family.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"
#include "ops/kernels.hpp"

namespace ablate {

Model::Model(const Options& o, int64_t vocab_size, uint64_t seed) : params_(seed) {
  dims_.vocab_size = vocab_size;
  dims_.d_model = o.get_in<int64_t>("d_model", 64, 1, 65536, "embedding width C");
  dims_.n_heads = o.get_in<int64_t>("n_heads", 4, 1, 4096, "attention heads NH");
  dims_.n_layers = o.get_in<int64_t>("n_layers", 4, 1, 1024, "transformer blocks");
  dims_.context = o.get_in<int64_t>("context", 64, 1, 1 << 20, "context length T (tokens)");
  dims_.ffn_multiplier = o.get_in<int64_t>("ffn_multiplier", 4, 1, 64, "FFN hidden width = multiplier * d_model");
  dims_.bias = o.get<bool>("bias", false, "biases in linear layers");
  dims_.dropout = o.get_in<float>("dropout", 0.0f, 0.0f, 0.99f, "dropout probability on embeddings and residual branches");
  tie_embeddings_ = o.get<bool>("tie_embeddings", false, "LM head shares the token embedding matrix");
  bool head_bias = o.get<bool>("head_bias", dims_.bias, "bias on the LM head");
  if (dims_.d_model % dims_.n_heads != 0)
    o.fail("n_heads", std::to_string(dims_.n_heads) + " does not divide d_model = " + std::to_string(dims_.d_model) +
                          "; choose n_heads among the divisors of d_model");

  // A family left out takes its default variant (family.hpp), written into the config.
  Options norm_opts = family_options(o, Norm::kFamily);
  placement_ = norm_opts.get_choice("placement", "pre", {"pre", "post"}, "norm before each sublayer (pre) or after the residual add (post)");
  bool final_norm = norm_opts.get<bool>("final", placement_ == "pre", "a norm before the LM head");

  auto& reg = PluginRegistry::instance();
  auto ctx = [&](const std::string& scope, int64_t layer) {
    ModelDims d = dims_;
    d.layer = layer;
    return BuildContext{d, ParamScope(params_, scope), seed};
  };
  tok_emb_ = &params_.add("tok_emb.weight", vocab_size, dims_.d_model, Init::kNormal, 0.02f, false);
  Options pos_opts = family_options(o, PositionalEncoding::kFamily);
  positional_ = reg.create<PositionalEncoding>(pos_opts, ctx("pos.", -1));
  positional_type_ = PluginRegistry::type_of(pos_opts);
  position_params_ = params_.count() - tok_emb_->value.numel();
  int64_t max_pos = positional_->max_positions();
  if (max_pos >= 0 && dims_.context > max_pos)
    o.fail("context", std::to_string(dims_.context) + " is longer than the positional encoding supports (" +
                          std::to_string(max_pos) + ")");

  Options attn_opts = family_options(o, Attention::kFamily);
  Options ffn_opts = family_options(o, Ffn::kFamily);
  for (int64_t l = 0; l < dims_.n_layers; ++l) {
    std::string p = "blocks." + std::to_string(l) + ".";
    Block b;
    b.norm1 = reg.create<Norm>(norm_opts, ctx(p + "norm1.", l));
    b.attn = reg.create<Attention>(attn_opts, ctx(p + "attn.", l));
    b.norm2 = reg.create<Norm>(norm_opts, ctx(p + "norm2.", l));
    b.ffn = reg.create<Ffn>(ffn_opts, ctx(p + "ffn.", l));
    blocks_.push_back(std::move(b));
  }
  if (final_norm) final_norm_ = reg.create<Norm>(norm_opts, ctx("final_norm.", -1));
  if (!tie_embeddings_) head_w_ = &params_.add("head.weight", dims_.d_model, vocab_size, Init::kNormal, 0.02f);
  if (head_bias) head_b_ = &params_.add("head.bias", 1, vocab_size, Init::kZeros, 0.0f, false);
  o.check_unused();
}

Model::~Model() = default;

int64_t Model::n_params_non_position() const { return params_.count() - position_params_; }

double Model::flops_per_token() const {
  return 6.0 * static_cast<double>(n_params_non_position()) +
         12.0 * static_cast<double>(dims_.n_layers * dims_.d_model * dims_.context);
}

std::vector<KVCache> Model::make_caches(int64_t batch, int64_t capacity) const {
  std::vector<KVCache> c(blocks_.size());
  for (size_t l = 0; l < blocks_.size(); ++l) c[l].init(batch, capacity, blocks_[l].attn->kv_width());
  return c;
}

Var Model::forward(Graph& g, const ForwardArgs& a) {
  // Decoding a few rows against KV caches, without dropout or attention weights: the
  // step runs on a decoding team of two threads (kernels.hpp), rank 1 on a graph of its
  // own; rank 0's graph `g` gets the logits, the same values a single thread computes.
  constexpr int64_t kDecodeRows = 4;
  // Only where its products split (a d x d one does): a model that small decodes faster
  // on one core (seed000: 136k tokens/s, against 101k on a team).
  if (a.caches && a.batch * a.time <= kDecodeRows && !a.attention_weights && !(g.training && dims_.dropout > 0) &&
      kernels::gemv_splits(dims_.d_model, dims_.d_model)) {
    if (!team_graph_) team_graph_ = std::make_unique<Graph>();
    Var logits;
    const bool ran = kernels::run_decode_team([&](int64_t rank) {
      if (rank == 0) {
        logits = forward_on(g, a);
        return;
      }
      Graph& g1 = *team_graph_;
      g1.reset();
      g1.grad_enabled = false;
      g1.training = g.training;
      forward_on(g1, a);
    });
    if (ran) return logits;
  }
  return forward_on(g, a);
}

Var Model::forward_on(Graph& g, const ForwardArgs& a) {
  const int64_t n = a.batch * a.time;
  Var x = embedding(g, g.param(*tok_emb_), a.ids, n);  // (B*T, C)
  PosContext pc{a.batch, a.time, a.pos0};
  x = positional_->embed(g, x, pc);
  x = dropout(g, x, dims_.dropout);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& b = blocks_[l];
    AttentionInput in;
    in.pos = pc;
    in.positional = positional_.get();
    in.cache = a.caches ? &(*a.caches)[l] : nullptr;
    in.key_mask = a.key_mask;
    in.weights_out = a.attention_weights ? (*a.attention_weights)[l] : nullptr;
    if (placement_ == "pre") {
      x = add(g, x, dropout(g, b.attn->forward(g, b.norm1->forward(g, x), in), dims_.dropout));
      x = add(g, x, dropout(g, b.ffn->forward(g, b.norm2->forward(g, x)), dims_.dropout));
    } else {
      x = b.norm1->forward(g, add(g, x, dropout(g, b.attn->forward(g, x, in), dims_.dropout)));
      x = b.norm2->forward(g, add(g, x, dropout(g, b.ffn->forward(g, x), dims_.dropout)));
    }
  }
  if (final_norm_) x = final_norm_->forward(g, x);
  Var bias = head_b_ ? g.param(*head_b_) : Var{};
  if (tie_embeddings_) return linear(g, x, g.param(*tok_emb_), bias, /*transpose_w=*/true);
  return linear(g, x, g.param(*head_w_), bias);
}

}  // namespace ablate
