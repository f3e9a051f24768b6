// Run inspection (see inspect.hpp): one forward pass with attention weights recorded, the
// embedding maps, and the positional encoding probed through its three hooks.
#include "ablate/inspect.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "ablate/error.hpp"
#include "ablate/registry.hpp"
#include "ablate/svg.hpp"

namespace ablate {
namespace {

// Length of the UTF-8 character starting with byte b (1 for invalid lead bytes).
size_t utf8_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

std::vector<std::string> utf8_chars(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    size_t n = std::min(utf8_length(static_cast<unsigned char>(text[i])), text.size() - i);
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

Eigen::MatrixXd to_matrix(const Tensor& t, bool transpose) {
  Eigen::MatrixXd m(t.rows, t.cols);
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c) m(r, c) = t.data[r * t.cols + c];
  if (transpose) return m.transpose();
  return m;
}

// Cosine similarity of every row of a with every row of b; NaN where a row is zero.
Eigen::MatrixXd cosine(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
  Eigen::MatrixXd s = a * b.transpose();
  const Eigen::VectorXd na = a.rowwise().norm(), nb = b.rowwise().norm();
  for (Eigen::Index i = 0; i < s.rows(); ++i)
    for (Eigen::Index j = 0; j < s.cols(); ++j)
      s(i, j) = na(i) > 0 && nb(j) > 0 ? s(i, j) / (na(i) * nb(j))
                                       : std::numeric_limits<double>::quiet_NaN();
  return s;
}

std::vector<std::string> numbers(int64_t n, const std::string& prefix = "") {
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(prefix + std::to_string(i));
  return v;
}

PositionalView view(const std::string& key, const std::string& variant, const std::string& title,
                    const std::string& caption) {
  PositionalView pv;
  pv.key = key;
  pv.variant = variant;
  pv.title = title;
  pv.caption = caption;
  return pv;
}

// The vectors embed() adds to zero rows at positions 0..T-1; with ids (and the prefix
// `prompt`) as an encoding that reads the tokens sees them, else without any.
Eigen::MatrixXd added_vectors(PositionalEncoding& pe, int64_t T, int64_t C, const int32_t* ids,
                              const int32_t* prompt) {
  Graph g;
  NoGrad no_grad(g);
  Batch b{ids, 1, T};
  b.prefix = prompt;
  Var y = pe.embed(g, g.input(T, C), b);
  return to_matrix(g.value(y), false);
}

// The encoding as the model sees it, probed through its hooks at positions 0..P-1:
// embed() on zero rows gives the added vectors; rotate() on all-ones queries and keys
// (one head of the model's head size) gives the implied kernel cos(q_i, k_j), which
// for a rotary encoding depends on i - j only; attention_slopes() gives the biases.
// An encoding whose vectors depend on the tokens (Batch::ids) is probed once more
// on the text `ids` (labels: its tokens), given whole as the prompt, as generation does.
struct Probe {
  PositionalEncoding& pe;
  const std::string& variant;
  int64_t P, C, NH, HS;  // positions, d_model, heads, head size
  std::string name = variant.empty() ? "the encoding" : variant;
  std::vector<std::string> positions = numbers(P);

  std::vector<PositionalView> views(const std::vector<int32_t>& ids,
                                    const std::vector<std::string>& id_labels) {
    std::vector<PositionalView> out;
    add_position_cosines(out);
    if (!ids.empty()) add_text_cosines(ids, id_labels, out);
    if (HS > 0) add_rotary_kernel(out);
    if (const float* slopes = pe.attention_slopes()) add_logit_bias(slopes, out);
    return out;
  }

  void add_position_cosines(std::vector<PositionalView>& out) {
    Eigen::MatrixXd v = added_vectors(pe, P, C, nullptr, nullptr);
    if (!(v.rows() == P && v.cols() == C && v.cwiseAbs().maxCoeff() > 0)) return;
    PositionalView pv =
        view("cosine", variant, name + ": cosine similarity of position vectors",
             "Cosine similarity between the vectors " + name +
                 " adds to the token embeddings at positions i (rows) and j (columns).");
    pv.row_labels = pv.col_labels = positions;
    pv.values = cosine(v, v);
    pv.vectors = v;
    out.push_back(std::move(pv));
  }

  void add_text_cosines(const std::vector<int32_t>& ids, const std::vector<std::string>& id_labels,
                        std::vector<PositionalView>& out) {
    const int64_t T = static_cast<int64_t>(ids.size());
    const int32_t prompt = static_cast<int32_t>(T);
    Eigen::MatrixXd text = added_vectors(pe, T, C, ids.data(), &prompt);
    Eigen::MatrixXd bare = added_vectors(pe, T, C, nullptr, nullptr);
    if (!(text.rows() == T && text.cols() == C && text.cwiseAbs().maxCoeff() > 0 && text != bare))
      return;
    PositionalView pv =
        view("cosine_text", variant, name + ": cosine similarity of position vectors on the text",
             name +
                 " reads the tokens: cosine similarity between the vectors it adds at positions "
                 "i (rows) and "
                 "j (columns) of the text, given whole as a prompt (as generation gives one), "
                 "labelled with "
                 "the text's tokens.");
    for (int32_t id : ids) pv.row_labels.push_back(id_labels[static_cast<size_t>(id)]);
    pv.col_labels = pv.row_labels;
    pv.values = cosine(text, text);
    pv.vectors = text;
    out.push_back(std::move(pv));
  }

  void add_rotary_kernel(std::vector<PositionalView>& out) {
    Graph g;
    NoGrad no_grad(g);
    const Batch b{nullptr, 1, P};
    Var q = g.input(P, HS), k = g.input(P, HS);
    std::fill(g.value(q).data, g.value(q).data + P * HS, 1.0f);
    std::fill(g.value(k).data, g.value(k).data + P * HS, 1.0f);
    pe.rotate(g, q, k, b, 1, 1, HS);
    Eigen::MatrixXd qm = to_matrix(g.value(q), false), km = to_matrix(g.value(k), false);
    if (!((qm.array() != 1.0).any() || (km.array() != 1.0).any())) return;
    PositionalView pv =
        view("rotary_kernel", variant, name + ": implied relative kernel cos(q_i, k_j)",
             "The same all-ones query and key (head size " + std::to_string(HS) + ") rotated by " +
                 name +
                 " at query position i (rows) and key position j (columns); their cosine is the "
                 "kernel the "
                 "encoding multiplies into attention scores. Constant along diagonals when it "
                 "depends on i - j only.");
    pv.row_labels = pv.col_labels = positions;
    pv.values = cosine(qm, km);
    out.push_back(std::move(pv));
  }

  void add_logit_bias(const float* slopes, std::vector<PositionalView>& out) {
    PositionalView pv = view("bias", variant, name + ": attention-logit bias -m_h (i - j)",
                             name +
                                 " adds no position vectors; it biases the logit of query i, key j "
                                 "by -m_h (i - j). Rows: "
                                 "heads with their slopes m_h; columns: distance i - j.");
    pv.values.resize(NH, P);
    for (int64_t h = 0; h < NH; ++h) {
      pv.row_labels.push_back("head " + std::to_string(h) +
                              " (m=" + svg::format_number(slopes[h], 3) + ")");
      for (int64_t d = 0; d < P; ++d)
        pv.values(h, d) = -static_cast<double>(slopes[h]) * static_cast<double>(d);
    }
    pv.col_labels = positions;
    out.push_back(std::move(pv));
  }
};

void map_tokens(TokenMap& m, const std::vector<int32_t>& shown, const InspectOptions& o,
                std::vector<std::string>& notes) {
  m.shown = shown;
  m.pca = pca_2d(m.matrix);
  Eigen::MatrixXd sub(static_cast<Eigen::Index>(shown.size()), m.matrix.cols());
  for (size_t i = 0; i < shown.size(); ++i)
    sub.row(static_cast<Eigen::Index>(i)) = m.matrix.row(shown[i]);
  if (shown.size() < 4 || o.perplexity > tsne_max_perplexity(static_cast<int64_t>(shown.size()))) {
    notes.push_back(m.name + ": t-SNE skipped: " + std::to_string(shown.size()) +
                    " tokens allow a perplexity of at most " +
                    std::to_string(tsne_max_perplexity(static_cast<int64_t>(shown.size()))));
    return;
  }
  TsneOptions t;
  t.perplexity = o.perplexity;
  t.seed = o.seed;
  t.iterations = o.tsne_iterations;
  m.tsne = tsne_2d(sub, t);
}

}  // namespace

std::string visible_token(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == ' ') out += "\xE2\x90\xA3";  // U+2423 OPEN BOX
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else out += static_cast<char>(c);
  }
  return out;
}

std::vector<std::string> unknown_characters(const Tokenizer& tok, const std::string& text) {
  std::vector<std::string> unknown;
  std::set<std::string> seen;
  for (const auto& c : utf8_chars(text)) {
    if (!seen.insert(c).second) continue;
    bool ok = false;
    try {
      ok = tok.decode(tok.encode(c)) == c;
    } catch (const Error&) {
      ok = false;
    }
    if (!ok) unknown.push_back(c);
  }
  return unknown;
}

namespace {

// The text as the run's tokenizer encodes it, and the options, checked against the model.
void check_text(const Tokenizer& tok, const ModelDims& d, const InspectOptions& o) {
  if (o.text.empty()) throw Error("the text is empty: give at least one character");
  auto unknown = unknown_characters(tok, o.text);
  if (!unknown.empty()) {
    std::string list;
    for (const auto& c : unknown) list += (list.empty() ? "'" : ", '") + visible_token(c) + "'";
    throw Error("the text has " + std::to_string(unknown.size()) + " character" +
                (unknown.size() == 1 ? "" : "s") + " the run's tokenizer does not know: " + list +
                "; use only characters of the training data");
  }
}

void check_sizes(const ModelDims& d, const InspectOptions& o, int64_t T, int64_t P) {
  if (T == 0) throw Error("the text encodes to no tokens");
  if (T > d.context)
    throw Error("the text is " + std::to_string(T) +
                " tokens long, longer than the model's context of " + std::to_string(d.context) +
                " (model.context); shorten it to at most " + std::to_string(d.context) + " tokens");
  if (o.top < 1) throw Error("top must be >= 1, got " + std::to_string(o.top));
  if (o.map_tokens < 4) throw Error("map_tokens must be >= 4, got " + std::to_string(o.map_tokens));
  if (P > d.context)
    throw Error("positions " + std::to_string(P) + " exceeds the model's context of " +
                std::to_string(d.context) + "; choose at most " + std::to_string(d.context));
}

// One forward pass over the text, the attention weights of every layer recorded, and the
// next token's probabilities.
void run_forward(Model& model, Inspection& in) {
  const int64_t T = in.time, V = in.vocab, L = in.n_layers, NH = in.n_heads;
  in.attention.assign(static_cast<size_t>(L * NH * T * T), 0.0f);
  std::vector<float*> buffers;
  for (int64_t l = 0; l < L; ++l) buffers.push_back(in.attention.data() + l * NH * T * T);
  Graph g;
  NoGrad no_grad(g);
  Batch a;
  a.ids = in.ids.data();
  a.batch = 1;
  a.time = T;
  a.attention_weights = &buffers;
  // The text is a prompt: a prefix LM (prefix_lm) reads it whole, as in generation.
  const int32_t prompt = static_cast<int32_t>(T);
  a.prefix = &prompt;
  Var logits = model.forward(g, a);  // (T, V)
  const float* last = g.value(logits).row(T - 1);
  const double mx = *std::max_element(last, last + V);
  std::vector<double> e(static_cast<size_t>(V));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v)
    sum += e[static_cast<size_t>(v)] = std::exp(static_cast<double>(last[v]) - mx);
  for (double x : e) in.next_probs.push_back(static_cast<float>(x / sum));
}

// The tokens the maps draw: all of a small vocabulary, else the text's tokens and then
// evenly spaced ids up to map_tokens (PCA is fitted on every token either way).
std::vector<int32_t> shown_tokens(Inspection& in, const InspectOptions& o) {
  const int64_t V = in.vocab;
  std::vector<int32_t> shown;
  if (V <= o.map_tokens) {
    for (int64_t v = 0; v < V; ++v) shown.push_back(static_cast<int32_t>(v));
    return shown;
  }
  std::set<int32_t> s(in.ids.begin(), in.ids.end());
  while (static_cast<int64_t>(s.size()) > o.map_tokens) s.erase(std::prev(s.end()));
  const int64_t room = o.map_tokens - static_cast<int64_t>(s.size());
  for (int64_t k = 0; k < room; ++k) s.insert(static_cast<int32_t>(k * V / room));
  for (int64_t v = 0; v < V && static_cast<int64_t>(s.size()) < o.map_tokens; ++v)
    s.insert(static_cast<int32_t>(v));
  shown.assign(s.begin(), s.end());
  in.notes.push_back(
      "the vocabulary has " + std::to_string(V) + " tokens: the maps draw " +
      std::to_string(shown.size()) +
      " (the text's tokens, then evenly spaced ids; --map-tokens), PCA is fitted on all of them");
  return shown;
}

// The token embedding's and LM head's maps (one map when they are tied).
void map_embeddings(Model& model, const InspectOptions& o, Inspection& in) {
  const std::vector<int32_t> shown = shown_tokens(in, o);
  in.embedding.name = "token embedding";
  in.embedding.matrix = to_matrix(model.token_embedding(), false);
  map_tokens(in.embedding, shown, o, in.notes);
  in.tied = model.lm_head_weight() == nullptr;
  in.head.name = "LM head";
  if (in.tied) {
    in.head = in.embedding;
    in.head.name = "LM head";
  } else {
    in.head.matrix = to_matrix(*model.lm_head_weight(), true);  // (C, V) -> (V, C)
    map_tokens(in.head, shown, o, in.notes);
  }
}

// Every parameter-free registered positional variant but the run's own, built at this
// model's sizes and probed for comparison (a variant with parameters would show its random
// initialisation, which says nothing).
void probe_references(const ModelDims& d, int64_t P, Inspection& in) {
  const int64_t NH = d.n_heads, HS = NH > 0 ? d.d_model / NH : 0;
  auto& reg = PluginRegistry::instance();
  for (const PluginEntry* e : reg.variants(PositionalEncoding::kFamily)) {
    const std::string name = e->info->name;
    if (name == in.positional_type) continue;
    ParamStore scratch(1);
    ModelDims dims = d;
    BuildContext ctx{dims, ParamScope(scratch, "pos."), 1};
    YAML::Node node;
    node["type"] = name;
    std::unique_ptr<PositionalEncoding> pe;
    try {
      pe = reg.create<PositionalEncoding>(
          Options(node, std::make_shared<ConfigSource>(), "model.positional"), ctx);
    } catch (const Error& err) {
      in.notes.push_back("reference " + name +
                         ": left out, it cannot be built at this model's sizes (" + err.what() +
                         ")");
      continue;
    }
    if (scratch.count() > 0) {
      in.notes.push_back("reference " + name +
                         ": left out, its positions are parameters, untrained here (inspect a run "
                         "trained with it)");
      continue;
    }
    auto views = Probe{*pe, name, P, d.d_model, NH, HS}.views(in.ids, in.vocab_labels);
    if (views.empty())
      in.notes.push_back("reference " + name +
                         ": no positional vectors (it adds, rotates and biases nothing)");
    for (auto& v : views) {
      v.reference = true;
      in.positional.push_back(std::move(v));
    }
  }
}

}  // namespace

Inspection inspect_run(LoadedRun& run, const InspectOptions& o) {
  Model& model = *run.model;
  const Tokenizer& tok = *run.tokenizer;
  const ModelDims& d = model.dims();
  Inspection in;
  in.run_dir = run.dir;
  in.step = run.step;
  in.text = o.text;
  in.perplexity = o.perplexity;
  in.seed = o.seed;
  in.top = o.top;
  in.n_layers = d.n_layers;
  in.n_heads = d.n_heads;
  in.vocab = d.vocab_size;
  in.d_model = d.d_model;
  in.context = d.context;
  Options root = run.experiment->root();
  in.run_name = root.get<std::string>("name", "");
  in.positional_type = model.positional_type();
  in.precision = precision_name(default_precision());

  check_text(tok, d, o);
  in.ids = tok.encode(o.text);
  const int64_t T = static_cast<int64_t>(in.ids.size());
  const int64_t P = o.positions > 0 ? o.positions : std::min<int64_t>(d.context, 64);
  check_sizes(d, o, T, P);
  in.time = T;
  for (int64_t v = 0; v < d.vocab_size; ++v) {
    std::string s = visible_token(tok.decode({static_cast<int32_t>(v)}));
    in.vocab_labels.push_back(s.empty() ? "#" + std::to_string(v) : s);
  }
  run_forward(model, in);
  map_embeddings(model, o, in);

  // The run's own positional encoding, then the references.
  const int64_t NH = d.n_heads, HS = NH > 0 ? d.d_model / NH : 0;
  auto own = Probe{model.positional(), in.positional_type, P, d.d_model, NH, HS}.views(
      in.ids, in.vocab_labels);
  if (own.empty())
    in.notes.push_back(
        (in.positional_type.empty() ? std::string("the positional encoding") : in.positional_type) +
        ": no positional vectors (it adds nothing to the embeddings, rotates no queries or keys "
        "and "
        "biases no logits; with a causal mask, position can still be inferred)");
  for (auto& v : own) in.positional.push_back(std::move(v));
  probe_references(d, P, in);
  return in;
}

}  // namespace ablate
