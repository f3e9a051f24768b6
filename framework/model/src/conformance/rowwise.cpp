// The conformance suites of the row-wise families, ffn and norm: x (rows, C) -> (rows, C),
// each row on its own. Both are held to the same checks, at their own sizes.
#include "ablate/ffn.hpp"
#include "ablate/norm.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

template <class Base>
void check_rowwise(Checker& ck, const Subject& s, int64_t C, int64_t rows, float x_std,
                   float param_std, bool both_bias) {
  auto run = [&](Base& m, const std::vector<float>& x) {
    Graph g;
    Var y = m.forward(g, g.constant(x.data(), rows, C));
    expect_shape(g, y, rows, C, "the output");
    return values(g, y);
  };
  const std::vector<float> x = randn(static_cast<size_t>(rows * C), 3, x_std);
  std::vector<bool> biases = both_bias ? std::vector<bool>{false, true} : std::vector<bool>{true};
  for (bool bias : biases) {
    const ModelDims d = small_dims(C, 2, 16, bias);
    const std::string tag =
        both_bias ? std::string(" [model.bias ") + (bias ? "true]" : "false]") : "";
    ck.run("builds; output (rows, C) = (" + std::to_string(rows) + ", " + std::to_string(C) +
               "), finite" + tag,
           [&](std::string& note) {
             auto a = build<Base>(s.options, path_of(s.family), d);
             expect_finite(run(*a.obj, x), "the output");
             note = std::to_string(a.store->count()) + " parameters";
           });
    ck.run("deterministic: same input, same output; same seed, same parameters" + tag,
           [&](std::string&) {
             auto a = build<Base>(s.options, path_of(s.family), d);
             auto b = build<Base>(s.options, path_of(s.family), d);
             const auto ya = run(*a.obj, x);
             expect(ya == run(*a.obj, x), "two calls on the same input differ");
             expect(ya == run(*b.obj, x), "two instances built with the same seed differ");
           });
    ck.run("gradients by finite differences (parameters and input)" + tag, [&](std::string& note) {
      auto a = build<Base>(s.options, path_of(s.family), d);
      randomize(*a.store, 5, param_std);
      ParamStore inputs(11);
      Parameter& xp = add_input(inputs, "x", rows, C);
      std::vector<Parameter*> wrt = a.store->all();
      wrt.push_back(&xp);
      expect_gradients([&](Graph& g) { return Outputs{a->forward(g, g.param(xp))}; }, wrt, note);
    });
  }
  check_options<Base>(ck, s, small_dims(C, 2, 16, true));
}

}  // namespace

void check_ffn(Checker& ck, const Subject& s) {
  check_rowwise<Ffn>(ck, s, 12, 6, 1.0f, 0.5f, true);
}

void check_norm(Checker& ck, const Subject& s) {
  check_rowwise<Norm>(ck, s, 10, 5, 2.0f, 1.0f, false);
}

}  // namespace ablate::conformance
