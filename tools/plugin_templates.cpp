// The skeletons of `ablate plugin new` (see plugin_templates.hpp). Each is a complete,
// small, real variant, so that the generated project builds, passes the conformance
// checks and trains before the researcher changes a line.
#include "plugin_templates.hpp"

namespace ablate::cli {

namespace {

const char* kFfn = R"TPL(// @NAME@: a feed-forward variant for ablate (family "ffn"), from `ablate plugin new ffn @NAME@`.
// As generated: the squared-ReLU FFN of Primer (So et al. 2021): relu(x W1 + b1)^2 W2 + b2.
// x (B*T, C) -> (B*T, C), hidden width H.
#include <algorithm>
#include <cmath>
#include <string>

#include "ablate/ffn.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Ffn {
 public:
  // Options are read where they are used: reading validates and documents them
  // (`ablate plugins ffn` lists them); keys nobody reads are rejected as unknown.
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c) {
    const int64_t C = c.dims.d_model;
    if (C <= 0) o.fail("", "d_model must be positive, got " + std::to_string(C));
    const int64_t hidden = o.get_in<int64_t>("hidden", 0, 0, int64_t{1} << 24, "hidden width H; 0 = ffn_multiplier * d_model");
    const bool bias = o.get<bool>("bias", c.dims.bias, "biases on both linear layers (default: model.bias)");
    H_ = hidden > 0 ? hidden : c.dims.ffn_multiplier * C;
    // Parameters are created through the scope, so their names are hierarchical
    // ("blocks.0.ffn.up.weight") and they are saved, decayed and optimised with the model.
    ablate::ParamScope ps = c.params;
    const float out_std = 0.02f / std::sqrt(2.0f * static_cast<float>(std::max<int64_t>(1, c.dims.n_layers)));
    w1_ = &ps.add("up.weight", C, H_, ablate::Init::kNormal, 0.02f);
    if (bias) b1_ = &ps.add("up.bias", 1, H_, ablate::Init::kZeros, 0.0f, /*weight_decay=*/false);
    w2_ = &ps.add("down.weight", H_, C, ablate::Init::kNormal, out_std);
    if (bias) b2_ = &ps.add("down.bias", 1, C, ablate::Init::kZeros, 0.0f, false);
  }

  // Composed of ops (ablate/ops.hpp), so the backward pass comes for free.
  ablate::Var forward(ablate::Graph& g, ablate::Var x) override {
    ablate::Var h = ablate::linear(g, x, g.param(*w1_), b1_ ? g.param(*b1_) : ablate::Var{});  // (B*T, H)
    h = ablate::relu(g, h);
    h = ablate::mul(g, h, h);
    return ablate::linear(g, h, g.param(*w2_), b2_ ? g.param(*b2_) : ablate::Var{});           // (B*T, C)
  }

 private:
  int64_t H_ = 0;
  ablate::Parameter *w1_ = nullptr, *b1_ = nullptr, *w2_ = nullptr, *b2_ = nullptr;
};

}  // namespace
// The registered name is what experiments write: `model: {ffn: @NAME@}`.
ABLATE_PLUGIN(ablate::Ffn, @NAME@, @CLASS@, "squared-ReLU feed-forward network (Primer)")
)TPL";

const char* kNorm = R"TPL(// @NAME@: a normalisation variant for ablate (family "norm"), from `ablate plugin new norm @NAME@`.
// As generated: RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * gain.
// x (B*T, C) -> (B*T, C); gain (1, C). Placement (pre/post) is the model's business.
#include <string>

#include "ablate/norm.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Norm {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c)
      : eps_(o.get_in<float>("eps", 1e-5f, 1e-12f, 1.0f, "added to the mean square")) {
    if (c.dims.d_model <= 0) o.fail("", "d_model must be positive, got " + std::to_string(c.dims.d_model));
    ablate::ParamScope ps = c.params;
    gain_ = &ps.add("weight", 1, c.dims.d_model, ablate::Init::kOnes, 0.0f, /*weight_decay=*/false);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x) override { return ablate::rmsnorm(g, x, g.param(*gain_), eps_); }

 private:
  float eps_;
  ablate::Parameter* gain_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Norm, @NAME@, @CLASS@, "RMS normalisation with a learned gain")
)TPL";

const char* kPositional = R"TPL(// @NAME@: a positional encoding for ablate (family "positional"), from
// `ablate plugin new positional @NAME@`. Positions act at three points (ablate/positional.hpp):
// embed (added to token embeddings), rotate (queries and keys), attention_slopes (logit
// biases); override the ones you need. As generated: learned absolute positions, a table
// P (context, C) added to x (B*T, C) at positions pos0 + t.
#include <string>
#include <vector>

#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"
#include "ablate/positional.hpp"

namespace {

class @CLASS@ final : public ablate::PositionalEncoding {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c) : context_(c.dims.context) {
    const float init_std = o.get_in<float>("init_std", 0.02f, 0.0f, 1.0f, "standard deviation of the table's initial values");
    if (c.dims.context <= 0 || c.dims.d_model <= 0)
      o.fail("", "needs positive context and d_model, got context = " + std::to_string(c.dims.context) +
                     ", d_model = " + std::to_string(c.dims.d_model));
    ablate::ParamScope ps = c.params;
    table_ = &ps.add("weight", c.dims.context, c.dims.d_model, ablate::Init::kNormal, init_std, /*weight_decay=*/false);
  }

  ablate::Var embed(ablate::Graph& g, ablate::Var x, const ablate::PosContext& pc) override {
    const int64_t B = pc.batch, T = pc.time;
    // Errors are thrown (never exit()): the CLI prints them.
    if (pc.pos0 < 0 || pc.pos0 + T > context_)
      throw ablate::Error("@NAME@: positions " + std::to_string(pc.pos0) + ".." + std::to_string(pc.pos0 + T - 1) +
                          " exceed the table of " + std::to_string(context_) + " (model.context)");
    ids_.resize(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) ids_[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(pc.pos0 + t);
    return ablate::add(g, x, ablate::embedding(g, g.param(*table_), ids_.data(), B * T));  // (B*T, C)
  }

  int64_t max_positions() const override { return context_; }
  // This variant leaves rotate() alone, so attention may skip it and read q, k and v
  // straight from the fused projection. Return true (the default) if you override rotate().
  bool rotates() const override { return false; }

 private:
  int64_t context_;
  ablate::Parameter* table_ = nullptr;
  std::vector<int32_t> ids_;
};

}  // namespace
ABLATE_PLUGIN(ablate::PositionalEncoding, @NAME@, @CLASS@, "learned absolute position embeddings")
)TPL";

const char* kAttention = R"TPL(// @NAME@: an attention variant for ablate (family "attention"), from
// `ablate plugin new attention @NAME@`. As generated: multi-head self-attention with separate
// q, k, v projections and the fused attention op (ablate/ops.hpp), which handles the causal
// mask, padding masks, ALiBi-style slopes, KV caches and attention weights.
// x (B*T, C) -> q, k, v (B*T, NH*HS) -> attention -> y Wo -> (B*T, C).
#include <string>

#include "ablate/attention.hpp"
#include "ablate/ops.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Attention {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext& c)
      : causal_(o.get<bool>("causal", true, "causal mask (decoder); false: every token sees every token (encoder)")) {
    C_ = c.dims.d_model;
    NH_ = c.dims.n_heads;
    if (C_ <= 0 || NH_ <= 0 || C_ % NH_ != 0)
      o.fail("", "needs n_heads dividing d_model, got d_model = " + std::to_string(C_) + ", n_heads = " + std::to_string(NH_));
    HS_ = C_ / NH_;
    ablate::ParamScope ps = c.params;
    wq_ = &ps.add("q.weight", C_, C_, ablate::Init::kNormal, 0.02f);
    wk_ = &ps.add("k.weight", C_, C_, ablate::Init::kNormal, 0.02f);
    wv_ = &ps.add("v.weight", C_, C_, ablate::Init::kNormal, 0.02f);
    wo_ = &ps.add("proj.weight", C_, C_, ablate::Init::kNormal, 0.02f);
  }

  ablate::Var forward(ablate::Graph& g, ablate::Var x, const ablate::AttentionInput& in) override {
    ablate::Var q = ablate::linear(g, x, g.param(*wq_));  // (B*T, NH*HS)
    ablate::Var k = ablate::linear(g, x, g.param(*wk_));
    ablate::Var v = ablate::linear(g, x, g.param(*wv_));
    if (in.positional) in.positional->rotate(g, q, k, in.pos, NH_, NH_, HS_);  // RoPE and friends
    ablate::AttentionSpec spec;
    spec.batch = in.pos.batch;
    spec.time = in.pos.time;
    spec.n_heads = NH_;
    spec.n_kv_heads = NH_;
    spec.head_size = HS_;
    spec.causal = causal_;
    spec.slopes = in.positional ? in.positional->attention_slopes() : nullptr;  // ALiBi
    spec.key_mask = in.key_mask;
    spec.weights_out = in.weights_out;
    spec.cache = in.cache;
    ablate::Var y = ablate::attention(g, q, k, v, spec);  // (B*T, C)
    return ablate::linear(g, y, g.param(*wo_));
  }

  int64_t kv_width() const override { return C_; }  // one cached key row: NKV*HS
  int64_t n_heads() const override { return NH_; }

 private:
  bool causal_;
  int64_t C_ = 0, NH_ = 0, HS_ = 0;
  ablate::Parameter *wq_ = nullptr, *wk_ = nullptr, *wv_ = nullptr, *wo_ = nullptr;
};

}  // namespace
ABLATE_PLUGIN(ablate::Attention, @NAME@, @CLASS@, "multi-head self-attention with separate q, k, v projections")
)TPL";

const char* kTokenizer = R"TPL(// @NAME@: a tokenizer for ablate (family "tokenizer"), from `ablate plugin new tokenizer @NAME@`.
// Fitted on the training text and saved with the run, so that generation encodes prompts as
// training did. As generated: the bytes that occur in the training text, sorted, then one
// unknown id (V-1) for the others. decode(encode(text)) == text for the training text.
#include <array>
#include <sstream>
#include <string>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/plugin.hpp"
#include "ablate/tokenizer.hpp"

namespace {

class @CLASS@ final : public ablate::Tokenizer {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : unknown_(o.get<std::string>("unknown", "\xEF\xBF\xBD", "text that the unknown id decodes to (default U+FFFD)")) {
    set_bytes({});
  }

  void fit(const std::string& text) override {
    std::array<bool, 256> seen{};
    for (unsigned char ch : text) seen[ch] = true;
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b)
      if (seen[static_cast<size_t>(b)]) bytes.push_back(b);
    set_bytes(bytes);
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (unsigned char ch : text) ids.push_back(id_[ch]);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) out += static_cast<char>(bytes_[static_cast<size_t>(id)]);
      else out += unknown_;
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(bytes_.size()) + 1; }

  std::string save() const override {
    std::ostringstream s;
    s << "@NAME@ 1 " << bytes_.size();
    for (int b : bytes_) s << " " << b;
    return s.str();
  }

  void load(const std::string& state) override {
    std::istringstream s(state);
    std::string magic;
    int version = 0;
    size_t n = 0;
    if (!(s >> magic >> version >> n) || magic != "@NAME@" || version != 1 || n > 256)
      throw ablate::Error("@NAME@ tokenizer state: not a version-1 @NAME@ state");
    std::vector<int> bytes(n);
    for (size_t i = 0; i < n; ++i)
      if (!(s >> bytes[i]) || bytes[i] < 0 || bytes[i] > 255) throw ablate::Error("@NAME@ tokenizer state: bad byte value");
    set_bytes(bytes);
  }

 private:
  void set_bytes(const std::vector<int>& bytes) {
    bytes_ = bytes;
    id_.fill(static_cast<int32_t>(bytes_.size()));  // the unknown id
    for (size_t i = 0; i < bytes_.size(); ++i) id_[static_cast<size_t>(bytes_[i])] = static_cast<int32_t>(i);
  }

  std::string unknown_;
  std::vector<int> bytes_;       // id -> byte
  std::array<int32_t, 256> id_;  // byte -> id
};

}  // namespace
ABLATE_PLUGIN(ablate::Tokenizer, @NAME@, @CLASS@, "the bytes of the training text plus an unknown id")
)TPL";

const char* kOptimizer = R"TPL(// @NAME@: an optimizer for ablate (family "optimizer"), from `ablate plugin new optimizer @NAME@`.
// State is exposed as named buffers so that checkpoints save and restore it bit for bit.
// As generated: SGD with momentum and decoupled weight decay (SGDW, Loshchilov & Hutter
// 2019): p -= lr * wd * p (decayed parameters only); m = mu * m + g; p -= lr * m.
#include <string>
#include <vector>

#include "ablate/error.hpp"
#include "ablate/optimizer.hpp"
#include "ablate/plugin.hpp"

namespace {

class @CLASS@ final : public ablate::Optimizer {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : lr_(o.get_in<float>("lr", 1e-2f, 1e-12f, 100.0f, "base learning rate (the scheduler multiplies it)")),
        momentum_(o.get_in<float>("momentum", 0.9f, 0.0f, 0.9999f, "momentum factor mu")),
        wd_(o.get_in<float>("weight_decay", 0.0f, 0.0f, 10.0f, "decoupled weight decay")) {}

  void init(const std::vector<ablate::Parameter*>& params) override {
    names_.clear();
    m_.clear();
    for (const ablate::Parameter* p : params) {
      names_.push_back(p->name);
      m_.emplace_back(static_cast<size_t>(p->value.numel()), 0.0f);
    }
  }

  void step(const std::vector<ablate::Parameter*>& params, float lr, int64_t) override {
    if (params.size() != m_.size()) throw ablate::Error("@NAME@: step() got other parameters than init()");
    for (size_t i = 0; i < params.size(); ++i) {
      ablate::Parameter& p = *params[i];
      float* w = p.value.data;
      const float* g = p.grad.data;
      float* m = m_[i].data();
      const float decay = p.weight_decay ? lr * wd_ : 0.0f;
      for (int64_t j = 0; j < p.value.numel(); ++j) {
        w[j] -= decay * w[j];
        m[j] = momentum_ * m[j] + g[j];
        w[j] -= lr * m[j];
      }
    }
  }

  float base_lr() const override { return lr_; }

  std::vector<ablate::StateBuffer> state() override {
    std::vector<ablate::StateBuffer> s;
    for (size_t i = 0; i < m_.size(); ++i) s.push_back({"momentum." + names_[i], &m_[i]});
    return s;
  }

 private:
  float lr_, momentum_, wd_;
  std::vector<std::string> names_;
  std::vector<std::vector<float>> m_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Optimizer, @NAME@, @CLASS@, "SGD with momentum and decoupled weight decay (SGDW)")
)TPL";

const char* kScheduler = R"TPL(// @NAME@: a learning-rate schedule for ablate (family "scheduler"), from
// `ablate plugin new scheduler @NAME@`. lr = optimizer.lr * factor(step, total).
// As generated: linear warmup, then exponential decay to final_factor at the last step.
#include <algorithm>
#include <cmath>

#include "ablate/plugin.hpp"
#include "ablate/scheduler.hpp"

namespace {

class @CLASS@ final : public ablate::Scheduler {
 public:
  @CLASS@(const ablate::Options& o, const ablate::BuildContext&)
      : warmup_(o.get_in<int64_t>("warmup", 0, 0, int64_t{1000000000}, "linear warmup steps")),
        final_(o.get_in<double>("final_factor", 0.1, 1e-6, 1.0, "factor reached at the last step")) {}

  float factor(int64_t step, int64_t total) const override {
    step = std::max<int64_t>(step, 0);
    const double progress = total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0) : 0.0;
    double f = std::pow(final_, progress);
    if (warmup_ > 0 && step < warmup_) f *= static_cast<double>(step + 1) / static_cast<double>(warmup_);
    return static_cast<float>(f);
  }

 private:
  int64_t warmup_;
  double final_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Scheduler, @NAME@, @CLASS@, "linear warmup then exponential decay")
)TPL";

const char* kEvaluator = R"TPL(// @NAME@: an evaluator for ablate (family "evaluator"), from `ablate plugin new evaluator @NAME@`.
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

 private:
  std::string text_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Evaluator, @NAME@, @CLASS@, "the model's loss on a fixed text")
)TPL";

const char* kCMake = R"TPL(# The ablate plugin @NAME@, built against an installed ablate:
#   cmake -S . -B build -DCMAKE_PREFIX_PATH=<where ablate is installed>
#   cmake --build build
#   ablate plugin check build/@NAME@.so
#   ablate run experiment.yaml --plugin-dir build
cmake_minimum_required(VERSION 3.20)
project(@NAME@ LANGUAGES CXX)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
find_package(ablate REQUIRED)
# A MODULE library @NAME@.so linked to ablate::core, compiled as ablate was (C++17, -march).
ablate_add_plugin(@NAME@ @NAME@.cpp)
)TPL";

}  // namespace

const std::vector<PluginTemplate>& plugin_templates() {
  static const std::vector<PluginTemplate> t{
      {"attention", "multi-head self-attention with separate q, k, v projections", kAttention},
      {"evaluator", "the model's loss on a fixed text", kEvaluator},
      {"ffn", "squared-ReLU feed-forward network (Primer)", kFfn},
      {"norm", "RMS normalisation with a learned gain", kNorm},
      {"optimizer", "SGD with momentum and decoupled weight decay", kOptimizer},
      {"positional", "learned absolute position embeddings", kPositional},
      {"scheduler", "linear warmup then exponential decay", kScheduler},
      {"tokenizer", "the bytes of the training text plus an unknown id", kTokenizer},
  };
  return t;
}

std::string plugin_cmakelists() { return kCMake; }

}  // namespace ablate::cli
