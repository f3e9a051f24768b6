// Conformance of every "norm" variant (shapes, determinism, gradients, options), plus the
// statistics of layernorm and rmsnorm outputs and their scale/shift options.
#include <doctest/doctest.h>

#include "ablate/norm.hpp"
#include "plugin_test_util.hpp"

using ablate::Norm;

namespace {

std::vector<float> run(Norm& n, const std::vector<float>& x, int64_t rows, int64_t C) {
  ablate::Graph g;
  ablate::Var y = n.forward(g, g.constant(x.data(), rows, C));
  CHECK(g.value(y).rows == rows);
  CHECK(g.value(y).cols == C);
  return ptest::values(g, y);
}

}  // namespace

TEST_CASE("norm/conformance: shapes, determinism, gradients and options of every variant") {
  ptest::check_conformance("norm");
}

TEST_CASE("norm/layernorm: zero mean, unit variance per row, scale and shift options") {
  const int64_t C = 16, rows = 3;
  const auto d = ptest::dims(C, 2);
  const auto x = ptest::randn(static_cast<size_t>(rows * C), 8, 3.0f);
  auto ln = ptest::build<Norm>("{type: layernorm}", d);
  REQUIRE(ln.store->all().size() == 2);
  CHECK(ln.store->all()[0]->name == "p.weight");
  CHECK(ln.store->all()[1]->name == "p.bias");
  CHECK_FALSE(ln.store->all()[0]->weight_decay());
  const auto y = run(*ln.obj, x, rows, C);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += y[static_cast<size_t>(r * C + c)];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += std::pow(y[static_cast<size_t>(r * C + c)] - m, 2);
    v /= C;
    CHECK(m == doctest::Approx(0).epsilon(1e-5).scale(1));
    CHECK(v == doctest::Approx(1).epsilon(1e-3));
  }
  // The JAX seed's "pre-LayerNorm without learned scale".
  CHECK(ptest::build<Norm>("{type: layernorm, scale: false}", d).store->count() == 0);
  CHECK(ptest::build<Norm>("{type: layernorm, scale: false, shift: true}", d).store->count() == C);
  CHECK(ptest::build<Norm>("{type: layernorm, shift: false}", d).store->count() == C);
  // Without parameters it is the same function as with the initial (unit, zero) ones.
  auto bare = ptest::build<Norm>("{type: layernorm, scale: false}", d);
  const auto yb = run(*bare.obj, x, rows, C);
  for (size_t i = 0; i < y.size(); ++i) CHECK(yb[i] == doctest::Approx(y[i]));
  CHECK_THROWS_AS(ptest::build<Norm>("{type: layernorm, eps: 0}", d), ablate::ConfigError);
}

TEST_CASE("norm/rmsnorm: unit root mean square per row, scale option") {
  const int64_t C = 16, rows = 3;
  const auto d = ptest::dims(C, 2);
  const auto x = ptest::randn(static_cast<size_t>(rows * C), 9, 3.0f);
  auto rn = ptest::build<Norm>("{type: rmsnorm}", d);
  CHECK(rn.store->count() == C);
  const auto y = run(*rn.obj, x, rows, C);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += std::pow(y[static_cast<size_t>(r * C + c)], 2);
    CHECK(ms / C == doctest::Approx(1).epsilon(1e-3));
  }
  // rmsnorm does not centre: a constant row keeps its sign.
  std::vector<float> c(static_cast<size_t>(C), 2.0f);
  const auto yc = run(*rn.obj, c, 1, C);
  CHECK(yc[0] == doctest::Approx(1.0).epsilon(1e-3));
  CHECK(ptest::build<Norm>("{type: rmsnorm, scale: false}", d).store->count() == 0);
}

TEST_CASE(
    "norm/dyt: gamma * tanh(alpha x) + beta with alpha = 0.5, the fused custom op equals the "
    "built-in ops, both conform") {
  const int64_t C = 12, rows = 5;
  const auto d = ptest::dims(C, 2);
  const auto x = ptest::randn(static_cast<size_t>(rows * C), 10, 2.0f);
  auto fused = ptest::build<Norm>("{type: dyt}", d);
  auto composed = ptest::build<Norm>("{type: dyt, fused: false}", d);
  REQUIRE(fused.store->all().size() == 3);
  CHECK(fused.store->all()[0]->name == "p.alpha");
  CHECK(fused.store->all()[0]->value.data[0] == 0.5f);
  CHECK(fused.store->count() == 1 + 2 * C);
  // Away from the init: gains and biases random, alpha 1.3.
  for (auto* s : {fused.store.get(), composed.store.get()}) {
    ablate::conformance::randomize(*s, 4);
    s->all()[0]->value.data[0] = 1.3f;
  }
  const auto yf = run(*fused.obj, x, rows, C), yc = run(*composed.obj, x, rows, C);
  const float* g = fused.store->all()[1]->value.data;
  const float* b = fused.store->all()[2]->value.data;
  for (int64_t i = 0; i < rows * C; ++i) {
    const double ref = g[i % C] * std::tanh(1.3 * x[static_cast<size_t>(i)]) + b[i % C];
    CHECK(yf[static_cast<size_t>(i)] == doctest::Approx(ref).epsilon(1e-5));
    CHECK(yc[static_cast<size_t>(i)] == doctest::Approx(ref).epsilon(1e-5));
  }
  // The fused op's hand-written backward is checked by finite differences in the
  // conformance test above; the composed path here.
  ablate::conformance::Settings s;
  s.options_yaml = "{fused: false}";
  const auto r = ablate::conformance::check_variant("norm", "dyt", s);
  for (const auto& c : r.checks) {
    INFO(c.name);
    CHECK_MESSAGE(c.passed, c.detail);
  }
  const auto rf = ablate::conformance::check_variant("norm", "dyt");
  bool noted = false;
  for (const auto& c : rf.checks)
    noted = noted || c.detail.find("custom ops: dyt") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("norm/plugin check fails a custom op with a wrong backward and names it") {
  const auto r = ptest::check_fixture("norm", "bad_custom_op");
  CHECK(ptest::failure_of(r, "gradients").find("bad_triple") != std::string::npos);
  CHECK_FALSE(r.passed());
}
