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

TEST_CASE("norm/layernorm: zero mean, unit variance per row; scale and shift options") {
  const int64_t C = 16, rows = 3;
  const auto d = ptest::dims(C, 2);
  const auto x = ptest::randn(static_cast<size_t>(rows * C), 8, 3.0f);
  auto ln = ptest::build<Norm>("{type: layernorm}", d);
  REQUIRE(ln.store->all().size() == 2);
  CHECK(ln.store->all()[0]->name == "p.weight");
  CHECK(ln.store->all()[1]->name == "p.bias");
  CHECK_FALSE(ln.store->all()[0]->weight_decay);
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

TEST_CASE("norm/rmsnorm: unit root mean square per row; scale option") {
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
