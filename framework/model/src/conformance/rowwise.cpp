// The conformance suites of the row-wise families, ffn and norm: x (rows, C) -> (rows, C),
// each row on its own. Both are held to the same checks, at their own sizes.
#include "ablate/ffn.hpp"
#include "ablate/norm.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

// What the checks share: the variant of family Base, the sizes, the input, and the model
// dimensions it is built with (model.bias true or false).
template <class Base>
struct RowwiseCase {
  const Subject& s;
  const int64_t C, rows;
  const float param_std;  // of the parameters in the gradient check
  const ModelDims d;
  const std::vector<float>& x;

  Built<Base> part() const { return build<Base>(s.options, path_of(s.family), d); }
  std::vector<float> run(Base& m, const std::vector<float>& xs) const {
    Graph g;
    Var y = m.forward(g, g.constant(xs.data(), rows, C));
    expect_shape(g, y, rows, C, "the output");
    return values(g, y);
  }
};

template <class Base>
void builds_finite(RowwiseCase<Base>& c, std::string& note) {
  auto a = c.part();
  expect_finite(c.run(*a.obj, c.x), "the output");
  note = std::to_string(a.store->count()) + " parameters";
}

template <class Base>
void is_deterministic(RowwiseCase<Base>& c, std::string&) {
  auto a = c.part();
  auto b = c.part();
  const auto ya = c.run(*a.obj, c.x);
  expect(ya == c.run(*a.obj, c.x), "two calls on the same input differ");
  expect(ya == c.run(*b.obj, c.x), "two instances built with the same seed differ");
}

template <class Base>
void gradients_match_finite_differences(RowwiseCase<Base>& c, std::string& note) {
  auto a = c.part();
  randomize(*a.store, 5, c.param_std);
  ParamStore inputs(11);
  Parameter& xp = add_input(inputs, "x", c.rows, c.C);
  std::vector<Parameter*> wrt = a.store->all();
  wrt.push_back(&xp);
  expect_gradients([&](Graph& g) { return Outputs{a->forward(g, g.param(xp))}; }, wrt, note);
}

// The checks with model.bias true, and with false as well when `both_bias` (tagged then).
template <class Base>
void check_rowwise(Checker& ck, const Subject& s, int64_t C, int64_t rows, float x_std,
                   float param_std, bool both_bias) {
  const std::vector<float> x = randn(static_cast<size_t>(rows * C), 3, x_std);
  std::vector<bool> biases = both_bias ? std::vector<bool>{false, true} : std::vector<bool>{true};
  for (bool bias : biases) {
    RowwiseCase<Base> c{s, C, rows, param_std, small_dims(C, 2, 16, bias), x};
    run_properties<RowwiseCase<Base>>(
        ck, c,
        {{"builds; output (rows, C) = (" + std::to_string(rows) + ", " + std::to_string(C) +
              "), finite",
          &builds_finite<Base>},
         {"deterministic: same input, same output; same seed, same parameters",
          &is_deterministic<Base>},
         {"gradients by finite differences (parameters and input)",
          &gradients_match_finite_differences<Base>}},
        both_bias ? std::string(" [model.bias ") + (bias ? "true]" : "false]") : "");
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
