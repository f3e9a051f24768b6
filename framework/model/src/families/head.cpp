// Family "head": its descriptor (see ablate/family.hpp) and conformance checks (the
// skeleton of `ablate plugin new head NAME` is tools/plugin_skeletons/head.cpp).
#include "ablate/head.hpp"
#include "kit.hpp"

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

void check_head(Checker& ck, const Subject& s) {
  constexpr int64_t C = 12, rows = 6;
  const std::vector<float> x = randn(static_cast<size_t>(rows * C), 3);
  auto run = [&](Head& h, const std::vector<float>& xs, int64_t V) {
    Graph g;
    Var y = h.forward(g, g.constant(xs.data(), rows, C));
    expect_shape(g, y, rows, V, "the logits");
    return values(g, y);
  };
  for (bool tied : {false, true})
    for (bool bias : {false, true}) {
      const ModelDims d = small_dims(C, 2, 16, bias);
      const int64_t V = d.vocab_size;
      const std::string tag = std::string(" [") + (tied ? "tied" : "untied") +
                              ", model.head_bias " + (bias ? "true]" : "false]");
      ck.run("builds; logits (rows, V) = (" + std::to_string(rows) + ", " + std::to_string(V) +
                 "), finite" + tag,
             [&](std::string& note) {
               auto h = build_head(s.options, d, tied);
               expect_finite(run(*h.obj, x, V), "the logits");
               const int64_t own = h.store->count() - h.embedding->value.numel();
               note = std::to_string(own) + " parameters of its own";
               expect(!tied || h->weight() == nullptr,
                      "tied to the embedding, yet weight() returns a matrix of its own; return "
                      "null when BuildContext::tied_embedding is set");
               if (tied) {
                 // The logits must follow the embedding it is tied to.
                 const auto y0 = run(*h.obj, x, V);
                 for (int64_t i = 0; i < h.embedding->value.numel(); ++i)
                   h.embedding->value.data[i] += 0.5f;
                 expect(run(*h.obj, x, V) != y0,
                        "tied, but the logits do not change with the token embedding; read "
                        "BuildContext::tied_embedding");
               } else if (h->weight()) {
                 expect(h->weight()->rows == C && h->weight()->cols == V,
                        "weight() is (" + std::to_string(h->weight()->rows) + ", " +
                            std::to_string(h->weight()->cols) + "), expected (C, V)");
               }
             });
      ck.run("each row of logits from its own row of x (decoding feeds one position)" + tag,
             [&](std::string&) {
               auto h = build_head(s.options, d, tied);
               const auto y0 = run(*h.obj, x, V);
               std::vector<float> x1 = x;
               for (int64_t c = 0; c < C; ++c) x1[static_cast<size_t>(2 * C + c)] += 1.0f;
               const auto y1 = run(*h.obj, x1, V);
               for (int64_t r = 0; r < rows; ++r) {
                 bool same = true;
                 for (int64_t v = 0; v < V; ++v)
                   same = same &&
                          y0[static_cast<size_t>(r * V + v)] == y1[static_cast<size_t>(r * V + v)];
                 expect(r == 2 ? !same : same,
                        "changing row 2 of x " +
                            std::string(r == 2 ? "leaves its logits as they were"
                                               : "changes the logits of row " + std::to_string(r)));
               }
             });
      ck.run("deterministic: same input, same output; same seed, same parameters" + tag,
             [&](std::string&) {
               auto a = build_head(s.options, d, tied), b = build_head(s.options, d, tied);
               const auto ya = run(*a.obj, x, V);
               expect(ya == run(*a.obj, x, V), "two calls on the same input differ");
               expect(ya == run(*b.obj, x, V), "two instances built with the same seed differ");
             });
      ck.run(
          "gradients by finite differences (parameters and input; the embedding when tied)" + tag,
          [&](std::string& note) {
            auto h = build_head(s.options, d, tied);
            randomize(*h.store, 5, 0.5f);
            ParamStore inputs(11);
            Parameter& xp = add_input(inputs, "x", rows, C, 2.0f);
            std::vector<Parameter*> wrt = h.store->all();
            if (!tied) wrt.erase(wrt.begin());  // the embedding is not the head's untied
            wrt.push_back(&xp);
            expect_gradients([&](Graph& g) { return Outputs{h->forward(g, g.param(xp))}; }, wrt,
                             note);
          });
    }
  check_options<Head>(ck, s, small_dims(C, 2, 16, true));
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Head::kFamily;
  d.key = "model.head";
  d.list = false;
  d.default_variant = "linear";
  d.summary = "the LM head: the last hidden states (B*T, C) -> logits (B*T, V)";
  d.checks = &check_head;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
