// The conformance suite of family "head": the LM head, tied to the token embedding or not,
// with or without a bias.
#include "ablate/head.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

// A head built as the model builds it: in a store that holds the token embedding first,
// tied to it or not, with or without a bias (dims.bias stands for model.head_bias).
struct BuiltHead {
  std::unique_ptr<ParamStore> store;  // declared first: destroyed after the plugin
  Parameter* embedding = nullptr;
  std::unique_ptr<Head> obj;
  Head* operator->() const { return obj.get(); }
};

BuiltHead build_head(const YAML::Node& node, const ModelDims& d, bool tied, uint64_t seed = 7) {
  BuiltHead b;
  b.store = std::make_unique<ParamStore>(seed);
  b.embedding = &b.store->add("tok_emb.weight", d.vocab_size, d.d_model, Role::kEmbedding);
  Options o(YAML::Clone(node), std::make_shared<ConfigSource>(), path_of(Head::kFamily));
  const std::vector<std::string> vocab = small_vocab(d.vocab_size);
  BuildContext c{d, ParamScope(*b.store, "head."), seed, nullptr, &vocab};
  c.tied_embedding = tied ? b.embedding : nullptr;
  b.obj = PluginRegistry::instance().create<Head>(o, c);
  initialise_default(*b.store, d);
  return b;
}

constexpr int64_t C = 12, rows = 6;

// What the head checks share, for one of the four builds (tied or not, with a bias or not).
struct HeadCase {
  const Subject& s;
  const bool tied;
  const ModelDims d;
  const int64_t V = d.vocab_size;
  const std::vector<float> x = randn(static_cast<size_t>(rows * C), 3);

  BuiltHead head() const { return build_head(s.options, d, tied); }
  std::vector<float> run(Head& h, const std::vector<float>& xs) const {
    Graph g;
    Var y = h.forward(g, g.constant(xs.data(), rows, C));
    expect_shape(g, y, rows, V, "the logits");
    return values(g, y);
  }
};

void builds_finite_logits(HeadCase& c, std::string& note) {
  auto h = c.head();
  expect_finite(c.run(*h.obj, c.x), "the logits");
  const int64_t own = h.store->count() - h.embedding->value.numel();
  note = std::to_string(own) + " parameters of its own";
  expect(!c.tied || h->weight() == nullptr,
         "tied to the embedding, yet weight() returns a matrix of its own; return "
         "null when BuildContext::tied_embedding is set");
  if (c.tied) {
    // The logits must follow the embedding it is tied to.
    const auto y0 = c.run(*h.obj, c.x);
    for (int64_t i = 0; i < h.embedding->value.numel(); ++i) h.embedding->value.data[i] += 0.5f;
    expect(c.run(*h.obj, c.x) != y0,
           "tied, but the logits do not change with the token embedding; read "
           "BuildContext::tied_embedding");
  } else if (h->weight()) {
    expect(h->weight()->rows == C && h->weight()->cols == c.V,
           "weight() is (" + std::to_string(h->weight()->rows) + ", " +
               std::to_string(h->weight()->cols) + "), expected (C, V)");
  }
}

void rows_are_apart(HeadCase& c, std::string&) {
  auto h = c.head();
  const auto y0 = c.run(*h.obj, c.x);
  std::vector<float> x1 = c.x;
  for (int64_t col = 0; col < C; ++col) x1[static_cast<size_t>(2 * C + col)] += 1.0f;
  const auto y1 = c.run(*h.obj, x1);
  for (int64_t r = 0; r < rows; ++r) {
    bool same = true;
    for (int64_t v = 0; v < c.V; ++v)
      same = same && y0[static_cast<size_t>(r * c.V + v)] == y1[static_cast<size_t>(r * c.V + v)];
    expect(r == 2 ? !same : same,
           "changing row 2 of x " +
               std::string(r == 2 ? "leaves its logits as they were"
                                  : "changes the logits of row " + std::to_string(r)));
  }
}

void is_deterministic(HeadCase& c, std::string&) {
  auto a = c.head(), b = c.head();
  const auto ya = c.run(*a.obj, c.x);
  expect(ya == c.run(*a.obj, c.x), "two calls on the same input differ");
  expect(ya == c.run(*b.obj, c.x), "two instances built with the same seed differ");
}

void gradients_match_finite_differences(HeadCase& c, std::string& note) {
  auto h = c.head();
  randomize(*h.store, 5, 0.5f);
  ParamStore inputs(11);
  Parameter& xp = add_input(inputs, "x", rows, C, 2.0f);
  std::vector<Parameter*> wrt = h.store->all();
  if (!c.tied) wrt.erase(wrt.begin());  // the embedding is not the head's untied
  wrt.push_back(&xp);
  expect_gradients([&](Graph& g) { return Outputs{h->forward(g, g.param(xp))}; }, wrt, note);
}

}  // namespace

void check_head(Checker& ck, const Subject& s) {
  for (bool tied : {false, true})
    for (bool bias : {false, true}) {
      HeadCase c{s, tied, small_dims(C, 2, 16, bias)};
      run_properties<HeadCase>(
          ck, c,
          {{"builds; logits (rows, V) = (" + std::to_string(rows) + ", " + std::to_string(c.V) +
                "), finite",
            &builds_finite_logits},
           {"each row of logits from its own row of x (decoding feeds one position)",
            &rows_are_apart},
           {"deterministic: same input, same output; same seed, same parameters",
            &is_deterministic},
           {"gradients by finite differences (parameters and input; the embedding when tied)",
            &gradients_match_finite_differences}},
          std::string(" [") + (tied ? "tied" : "untied") + ", model.head_bias " +
              (bias ? "true]" : "false]"));
    }
  check_options<Head>(ck, s, small_dims(C, 2, 16, true));
}

}  // namespace ablate::conformance
