// GPT assembly from plugins (see model.hpp).
#include "ablate/model.hpp"

#include "ablate/family.hpp"
#include "ablate/init.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"

namespace ablate {

namespace {

// model.blocks: a list whose entries are a block ("prenorm", or a map {type: parallel,
// shared_norm: false}) or a block repeated ("prenorm*4"); one Options per layer.
std::vector<Options> block_pattern(const Options& o) {
  std::vector<Options> layers;
  const YAML::Node list = o.node()["blocks"];
  o.mark_used("blocks");
  if (!list.IsSequence() || list.size() == 0)
    o.fail("blocks",
           "expected a non-empty list of blocks, one entry per layer or NAME*COUNT, e.g. "
           "[prenorm*4, parallel*2]");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = o.key_path("blocks") + "." + std::to_string(i);
    const std::string s = list[i].IsScalar() ? list[i].Scalar() : "";
    const size_t star = s.find('*');
    if (star == std::string::npos) {
      layers.emplace_back(list[i], o.source(), path);
      continue;
    }
    const std::string count = s.substr(star + 1);
    int64_t k = 0;
    for (char ch : count)
      k = std::isdigit(static_cast<unsigned char>(ch)) && k < 100000 ? 10 * k + (ch - '0') : -1;
    if (count.empty() || k <= 0)
      o.fail("blocks", "entry " + std::to_string(i) + " '" + s +
                           "': the count after '*' must be a positive integer, e.g. prenorm*4");
    for (int64_t r = 0; r < k; ++r)
      layers.emplace_back(YAML::Node(s.substr(0, star)), o.source(), path);
  }
  return layers;
}

// The model's sizes (model.d_model, n_heads, n_layers, ...), checked against each other and
// against model.blocks (`layers`, when `pattern`), and the LM head's two switches.
struct ModelSizes {
  ModelDims dims;
  bool tie_embeddings = false;
  bool head_bias = false;
};

ModelSizes read_sizes(const Options& o, int64_t vocab_size, const std::vector<Options>& layers,
                      bool pattern) {
  ModelSizes r;
  ModelDims& d = r.dims;
  d.vocab_size = vocab_size;
  d.d_model = o.get_in<int64_t>("d_model", 64, 1, 65536, "embedding width C");
  d.n_heads = o.get_in<int64_t>("n_heads", 4, 1, 4096, "attention heads NH");
  d.n_layers =
      o.get_in<int64_t>("n_layers", pattern ? static_cast<int64_t>(layers.size()) : 4, 1, 1024,
                        "transformer blocks (default with model.blocks: its length)");
  d.context = o.get_in<int64_t>("context", 64, 1, 1 << 20, "context length T (tokens)");
  d.ffn_multiplier =
      o.get_in<int64_t>("ffn_multiplier", 4, 1, 64, "FFN hidden width = multiplier * d_model");
  d.bias = o.get<bool>("bias", false, "biases in linear layers");
  d.dropout = o.get_in<float>("dropout", 0.0f, 0.0f, 0.99f,
                              "dropout probability on embeddings and residual branches");
  r.tie_embeddings =
      o.get<bool>("tie_embeddings", false, "LM head shares the token embedding matrix");
  r.head_bias = o.get<bool>("head_bias", d.bias, "bias on the LM head");
  if (d.d_model % d.n_heads != 0)
    o.fail("n_heads", std::to_string(d.n_heads) +
                          " does not divide d_model = " + std::to_string(d.d_model) +
                          "; choose n_heads among the divisors of d_model");
  if (pattern && static_cast<int64_t>(layers.size()) != d.n_layers)
    o.fail("blocks",
           "gives " + std::to_string(layers.size()) + " layers but n_layers is " +
               std::to_string(d.n_layers) +
               "; make them agree (or leave n_layers out: it defaults to the pattern's length)");
  if (pattern && o.has("block"))
    o.fail("block", "give either block (every layer) or blocks (one per layer), not both");
  return r;
}

}  // namespace

// What blocks create their attention, FFN and norms from: the model's options.
class Model::Parts final : public BlockParts {
 public:
  Parts(Options attn, Options ffn, Options norm)
      : attn_opts(std::move(attn)), ffn_opts(std::move(ffn)), norm_opts(std::move(norm)) {}
  Options attn_opts, ffn_opts, norm_opts;
  std::unique_ptr<Attention> attention(const BuildContext& b,
                                       const std::string& scope) const override {
    return PluginRegistry::instance().create<Attention>(attn_opts, under(b, scope));
  }
  std::unique_ptr<Ffn> ffn(const BuildContext& b, const std::string& scope) const override {
    return PluginRegistry::instance().create<Ffn>(ffn_opts, under(b, scope));
  }
  std::unique_ptr<Norm> norm(const BuildContext& b, const std::string& scope) const override {
    return PluginRegistry::instance().create<Norm>(norm_opts, under(b, scope));
  }

 private:
  static BuildContext under(const BuildContext& b, const std::string& scope) {
    BuildContext c = b;
    c.params = ParamScope(b.params.store(), b.params.prefix() + scope);
    c.parts = nullptr;
    return c;
  }
};

Model::Model(const Options& o, int64_t vocab_size, uint64_t seed,
             const std::vector<std::string>& vocab)
    : params_(seed) {
  if (static_cast<int64_t>(vocab.size()) > vocab_size)
    throw Error("Model: " + std::to_string(vocab.size()) + " token texts for a vocabulary of " +
                std::to_string(vocab_size) + " ids");
  // Plugins see vocab_size texts (BuildContext::vocab): the objective's extra ids are "".
  std::vector<std::string> texts = vocab;
  if (!texts.empty()) texts.resize(static_cast<size_t>(vocab_size));
  const bool pattern = o.has("blocks");
  std::vector<Options> layers = pattern ? block_pattern(o) : std::vector<Options>{};
  const ModelSizes sizes = read_sizes(o, vocab_size, layers, pattern);
  dims_ = sizes.dims;
  const bool tie_embeddings = sizes.tie_embeddings, head_bias = sizes.head_bias;

  // What the blocks build their leaves from; lives while they are built (BuildContext::parts).
  Parts parts(family_options(o, Attention::kFamily), family_options(o, Ffn::kFamily),
              family_options(o, Norm::kFamily));
  if (parts.norm_opts.has("placement"))
    parts.norm_opts.fail(
        "placement",
        "was replaced by the block family: write model.block: prenorm (placement: pre) or "
        "model.block: postnorm (placement: post), and remove norm.placement (docs/MODELS.md)");
  parts.norm_opts.mark_used("final");  // read below, once the blocks say what it defaults to

  auto& reg = PluginRegistry::instance();
  auto ctx = [&](const std::string& scope, int64_t layer) {
    ModelDims d = dims_;
    d.layer = layer;
    return BuildContext{d, ParamScope(params_, scope), seed, &parts,
                        texts.empty() ? nullptr : &texts};
  };
  tok_emb_ = &params_.add("tok_emb.weight", vocab_size, dims_.d_model, Role::kEmbedding);
  Options pos_opts = family_options(o, PositionalEncoding::kFamily);
  positional_ = reg.create<PositionalEncoding>(pos_opts, ctx("pos.", -1));
  positional_type_ = PluginRegistry::type_of(pos_opts);
  position_params_ = params_.count() - tok_emb_->value.numel();
  int64_t max_pos = positional_->max_positions();
  if (max_pos >= 0 && dims_.context > max_pos)
    o.fail("context", std::to_string(dims_.context) +
                          " is longer than the positional encoding supports (" +
                          std::to_string(max_pos) + ")");

  if (!pattern)
    layers.assign(static_cast<size_t>(dims_.n_layers), family_options(o, Block::kFamily));
  for (int64_t l = 0; l < dims_.n_layers; ++l)
    blocks_.push_back(reg.create<Block>(layers[static_cast<size_t>(l)],
                                        ctx("blocks." + std::to_string(l) + ".", l)));
  const bool final_norm =
      parts.norm_opts.get<bool>("final", blocks_.back()->final_norm(),
                                "a norm before the LM head (default: as the last block says)");
  if (final_norm) final_norm_ = reg.create<Norm>(parts.norm_opts, ctx("final_norm.", -1));
  // The LM head (model.head): its bias follows model.head_bias, and it reads the token
  // embedding when tied to it. Its parameters come last ("head.weight", "head.bias").
  BuildContext head_ctx = ctx("head.", -1);
  head_ctx.dims.bias = head_bias;
  head_ctx.tied_embedding = tie_embeddings ? tok_emb_ : nullptr;
  head_ = reg.create<Head>(family_options(o, Head::kFamily), head_ctx);
  // Values by role, drawn in creation order: the init variant (model.init) decides them.
  initialise(params_,
             *reg.create<Initializer>(family_options(o, Initializer::kFamily), ctx("", -1)));
  o.check_unused();
}

Model::~Model() = default;

void scored_prefix(const int32_t* targets, int64_t batch, int64_t time,
                   std::vector<int32_t>& prefix) {
  prefix.assign(static_cast<size_t>(batch), static_cast<int32_t>(time));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < time; ++t)
      if (targets[b * time + t] >= 0) {
        prefix[static_cast<size_t>(b)] = static_cast<int32_t>(t + 1);
        break;
      }
}

int64_t Model::n_params_non_position() const { return params_.count() - position_params_; }

bool Model::causal() const {
  for (const auto& b : blocks_)
    if (!b->attention().causal()) return false;
  return true;
}

double Model::flops_per_token() const {
  return 6.0 * static_cast<double>(n_params_non_position()) +
         12.0 * static_cast<double>(dims_.n_layers * dims_.d_model * dims_.context);
}

std::vector<KVCache> Model::make_caches(int64_t batch, int64_t capacity) const {
  std::vector<KVCache> c(blocks_.size());
  for (size_t l = 0; l < blocks_.size(); ++l)
    c[l].init(batch, capacity, blocks_[l]->attention().kv_width());
  return c;
}

Var Model::forward(Graph& g, const Batch& in) {
  Batch b = in;  // with each block's layer and the positional encoding
  b.layer = -1;
  b.positional = positional_.get();
  Var x = embedding(g, g.param(*tok_emb_), b.ids, b.rows());  // (B*T, C)
  x = positional_->embed(g, x, b);
  x = dropout(g, x, dims_.dropout);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    b.layer = static_cast<int64_t>(l);
    x = blocks_[l]->forward(g, x, b);
  }
  if (final_norm_) x = final_norm_->forward(g, x);
  return head_->forward(g, x);  // (B*T, V)
}

}  // namespace ablate
