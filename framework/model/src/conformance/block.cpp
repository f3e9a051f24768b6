// The conformance suite of family "block": one layer, its attention, FFN and norms built
// through BuildContext::parts. A block is checked with the default attention, FFN and norm as
// its leaves.
#include "ablate/block.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

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

constexpr int64_t C = 8, NH = 2, B = 2, T = 4;

// What the block checks share: the variant, its leaves and the input.
struct BlockCase {
  const Subject& s;
  const ModelDims d = small_dims(C, NH, 16);
  const CheckParts parts;
  const std::vector<float> x = randn(static_cast<size_t>(B * T * C), 3);

  explicit BlockCase(const Subject& subject) : s(subject) {}
  Built<Block> block() const { return build_block(s.options, d, &parts); }
};

// The output of b sequences of t positions from pos0, through `caches` (one, layer 0) when
// given.
std::vector<float> run(Block& blk, const std::vector<float>& x, int64_t b, int64_t t,
                       int64_t pos0 = 0, std::vector<KVCache>* caches = nullptr) {
  Graph g;
  g.grad_enabled = caches == nullptr;
  Batch in{nullptr, b, t, pos0};
  in.caches = caches;
  in.layer = 0;
  Var y = blk.forward(g, g.constant(x.data(), b * t, C), in);
  expect_shape(g, y, b * t, C, "the output");
  return values(g, y);
}

void builds_its_leaves(BlockCase& c, std::string& note) {
  auto a = c.block();
  expect(a->attention().kv_width() > 0,
         "attention() is not the attention it was given (kv_width() is 0)");
  expect_finite(run(*a.obj, c.x, B, T), "the output");
  note = std::to_string(a.store->count()) + " parameters, final norm " +
         (a->final_norm() ? "yes" : "no");
}

void refuses_to_build_without_parts(BlockCase& c, std::string&) {
  try {
    build_block(c.s.options, c.d, nullptr);
  } catch (const Error&) {
    return;
  }
  expect(false, "built without parts: a block must create its sublayers with block_parts(ctx)");
}

void is_deterministic(BlockCase& c, std::string&) {
  auto a = c.block(), b = c.block();
  const auto ya = run(*a.obj, c.x, B, T);
  expect(ya == run(*a.obj, c.x, B, T), "two calls on the same input differ");
  expect(ya == run(*b.obj, c.x, B, T), "two instances built with the same seed differ");
}

void gradients_match_finite_differences(BlockCase& c, std::string& note) {
  auto a = c.block();
  randomize(*a.store, 5, 0.5f);
  ParamStore inputs(11);
  Parameter& xp = add_input(inputs, "x", B * T, C);
  std::vector<Parameter*> wrt = a.store->all();
  wrt.push_back(&xp);
  expect_gradients(
      [&](Graph& g) {
        Batch in{nullptr, B, T};
        in.layer = 0;
        return Outputs{a->forward(g, g.param(xp), in)};
      },
      wrt, note);
}

void cached_decoding_matches_full_forward(BlockCase& c, std::string& note) {
  auto a = c.block();
  if (!a->attention().causal()) {
    note = "not checked: the default attention is not causal";
    return;
  }
  randomize(*a.store, 6, 0.3f);
  const auto full = run(*a.obj, c.x, 1, T);
  std::vector<KVCache> caches(1);
  caches[0].init(1, T, a->attention().kv_width());
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> row(c.x.begin() + t * C, c.x.begin() + (t + 1) * C);
    const auto y = run(*a.obj, row, 1, 1, t, &caches);
    for (int64_t col = 0; col < C; ++col)
      expect(close(y[static_cast<size_t>(col)], full[static_cast<size_t>(t * C + col)], 1e-4),
             "position " + std::to_string(t) + " channel " + std::to_string(col) + ": " +
                 num(y[static_cast<size_t>(col)]) + " decoded, " +
                 num(full[static_cast<size_t>(t * C + col)]) +
                 " in the full forward (is the cache passed on?)");
  }
}

}  // namespace

void check_block(Checker& ck, const Subject& s) {
  BlockCase c(s);
  run_properties<BlockCase>(
      ck, c,
      {{"builds its leaves through BuildContext::parts; output (B*T, C), finite",
        &builds_its_leaves},
       {"without a model (BuildContext::parts null): an ablate::Error, not a crash",
        &refuses_to_build_without_parts},
       {"deterministic: same input, same output; same seed, same parameters", &is_deterministic},
       {"gradients by finite differences (parameters and input)",
        &gradients_match_finite_differences},
       {"KV-cache decoding one token at a time reproduces the full forward (causal attention)",
        &cached_decoding_matches_full_forward}});
  check_block_options(ck, s, c.d, c.parts);
}

}  // namespace ablate::conformance
