// Family "block": its descriptor (see ablate/family.hpp) and conformance checks (the
// skeleton of `ablate plugin new block NAME` is tools/plugin_skeletons/block.cpp). A block is
// checked with the default attention, FFN and norm as its leaves.
#include "ablate/block.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

// ---- block: one layer, its attention, FFN and norms built through BuildContext::parts ------

// The leaves a block gets in the checks: the default variants of attention, FFN and norm
// (their descriptors').
class CheckParts final : public BlockParts {
 public:
  std::unique_ptr<Attention> attention(const BuildContext& b,
                                       const std::string& scope) const override {
    return make<Attention>(b, scope);
  }
  std::unique_ptr<Ffn> ffn(const BuildContext& b, const std::string& scope) const override {
    return make<Ffn>(b, scope);
  }
  std::unique_ptr<Norm> norm(const BuildContext& b, const std::string& scope) const override {
    return make<Norm>(b, scope);
  }

 private:
  template <class T>
  static std::unique_ptr<T> make(const BuildContext& b, const std::string& scope) {
    BuildContext c = b;
    c.params = ParamScope(b.params.store(), b.params.prefix() + scope);
    c.parts = nullptr;
    const std::string type = family(T::kFamily).default_variant;
    return PluginRegistry::instance().create<T>(
        options_from_yaml("{type: " + type + "}", family(T::kFamily).key), c);
  }
};

Built<Block> build_block(const YAML::Node& node, const ModelDims& d, const BlockParts* parts) {
  Built<Block> b;
  b.store = std::make_unique<ParamStore>(7);
  Options o(YAML::Clone(node), std::make_shared<ConfigSource>(), "model.block");
  b.obj = PluginRegistry::instance().create<Block>(
      o, BuildContext{d, ParamScope(*b.store, "p."), 7, parts});
  return b;
}

void check_block_options(Checker& ck, const Subject& s, const ModelDims& d,
                         const BlockParts& parts) {
  ck.run("rejects an unknown option", [&](std::string&) {
    try {
      build_block(s.with("no_such_option", YAML::Node(1)), d, &parts);
    } catch (const ConfigError& e) {
      expect(contains(e.what(), "no_such_option"),
             std::string("the error does not name the key: ") + e.what());
      return;
    }
    expect(false, "{no_such_option: 1} was accepted; read options with Options::get");
  });
  ck.run("rejects absurd values of numeric options", [&](std::string& note) {
    int n_numeric = 0;
    for (const OptionDoc& doc : describe(s.family, s.name, d, "model.block")) {
      if (doc.type != "a number" && doc.type != "an integer") continue;
      ++n_numeric;
      int rejected = 0;
      const std::vector<std::string> absurd =
          doc.type == "a number"
              ? std::vector<std::string>{"-1e30", "1e30"}
              : std::vector<std::string>{"-4611686018427387904", "4611686018427387904"};
      for (const std::string& v : absurd) {
        try {
          build_block(s.with(doc.key, YAML::Load(v)), d, &parts);
        } catch (const ConfigError& e) {
          expect(contains(e.what(), "model.block." + doc.key),
                 "option '" + doc.key + "' = " + v +
                     " is rejected, but the error does not name model.block." + doc.key);
          ++rejected;
        }
      }
      expect(rejected > 0, "numeric option '" + doc.key + "' accepts both " + absurd[0] + " and " +
                               absurd[1] + "; give it a range (Options::get_in)");
    }
    note = n_numeric ? std::to_string(n_numeric) + " numeric option" + (n_numeric > 1 ? "s" : "")
                     : "no numeric options";
  });
}

void check_block(Checker& ck, const Subject& s) {
  constexpr int64_t C = 8, NH = 2, B = 2, T = 4;
  const ModelDims d = small_dims(C, NH, 16);
  const CheckParts parts;
  auto run = [&](Block& blk, const std::vector<float>& x, int64_t b, int64_t t, int64_t pos0 = 0,
                 KVCache* cache = nullptr) {
    Graph g;
    g.grad_enabled = cache == nullptr;
    AttentionInput in;
    in.pos = {b, t, pos0};
    in.cache = cache;
    Var y = blk.forward(g, g.constant(x.data(), b * t, C), in);
    expect_shape(g, y, b * t, C, "the output");
    return values(g, y);
  };
  const auto x = randn(static_cast<size_t>(B * T * C), 3);
  ck.run("builds its leaves through BuildContext::parts; output (B*T, C), finite",
         [&](std::string& note) {
           auto a = build_block(s.options, d, &parts);
           expect(a->attention().kv_width() > 0,
                  "attention() is not the attention it was given (kv_width() is 0)");
           expect_finite(run(*a.obj, x, B, T), "the output");
           note = std::to_string(a.store->count()) + " parameters, final norm " +
                  (a->final_norm() ? "yes" : "no");
         });
  ck.run("without a model (BuildContext::parts null): an ablate::Error, not a crash",
         [&](std::string&) {
           try {
             build_block(s.options, d, nullptr);
           } catch (const Error&) {
             return;
           }
           expect(false,
                  "built without parts: a block must create its sublayers with block_parts(ctx)");
         });
  ck.run("deterministic: same input, same output; same seed, same parameters", [&](std::string&) {
    auto a = build_block(s.options, d, &parts), b = build_block(s.options, d, &parts);
    const auto ya = run(*a.obj, x, B, T);
    expect(ya == run(*a.obj, x, B, T), "two calls on the same input differ");
    expect(ya == run(*b.obj, x, B, T), "two instances built with the same seed differ");
  });
  ck.run("gradients by finite differences (parameters and input)", [&](std::string& note) {
    auto a = build_block(s.options, d, &parts);
    randomize(*a.store, 5, 0.5f);
    ParamStore inputs(11);
    Parameter& xp = add_input(inputs, "x", B * T, C);
    std::vector<Parameter*> wrt = a.store->all();
    wrt.push_back(&xp);
    expect_gradients(
        [&](Graph& g) {
          AttentionInput in;
          in.pos = {B, T, 0};
          return Outputs{a->forward(g, g.param(xp), in)};
        },
        wrt, note);
  });
  ck.run("KV-cache decoding one token at a time reproduces the full forward (causal attention)",
         [&](std::string& note) {
           auto a = build_block(s.options, d, &parts);
           if (!a->attention().causal()) {
             note = "not checked: the default attention is not causal";
             return;
           }
           randomize(*a.store, 6, 0.3f);
           const auto full = run(*a.obj, x, 1, T);
           KVCache cache;
           cache.init(1, T, a->attention().kv_width());
           for (int64_t t = 0; t < T; ++t) {
             const std::vector<float> row(x.begin() + t * C, x.begin() + (t + 1) * C);
             const auto y = run(*a.obj, row, 1, 1, t, &cache);
             for (int64_t c = 0; c < C; ++c)
               expect(close(y[static_cast<size_t>(c)], full[static_cast<size_t>(t * C + c)], 1e-4),
                      "position " + std::to_string(t) + " channel " + std::to_string(c) + ": " +
                          num(y[static_cast<size_t>(c)]) + " decoded, " +
                          num(full[static_cast<size_t>(t * C + c)]) +
                          " in the full forward (is the cache passed on?)");
           }
         });
  check_block_options(ck, s, d, parts);
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Block::kFamily;
  d.key = "model.block";
  d.list = false;
  d.default_variant = "prenorm";
  d.summary =
      "one layer, residuals included, wired from the model's attention, FFN and norm: x (B*T, C) "
      "-> (B*T, C)";
  d.checks = &check_block;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
