// Conformance of every "ffn" variant (shapes, determinism, gradients, options), plus the
// gated FFNs' hidden width rule of REFERENCE.md item 3 and known values of relu and relu2.
#include <doctest/doctest.h>

#include "ablate/ffn.hpp"
#include "plugin_test_util.hpp"

using ablate::Ffn;

namespace {

std::vector<float> run(Ffn& f, const std::vector<float>& x, int64_t rows, int64_t C) {
  ablate::Graph g;
  ablate::Var y = f.forward(g, g.constant(x.data(), rows, C));
  CHECK(g.value(y).rows == rows);
  CHECK(g.value(y).cols == C);
  return ptest::values(g, y);
}

}  // namespace

TEST_CASE("ffn/conformance: shapes, determinism, gradients and options of every variant") {
  ptest::check_conformance("ffn");
}

TEST_CASE("ffn/hidden: explicit hidden width sets every hidden dimension") {
  for (const std::string& name : ptest::variants("ffn")) {
    INFO("ffn '" << name << "'");
    auto f = ptest::build<Ffn>("{type: " + name + ", hidden: 20}", ptest::dims(12, 2, 16, false));
    for (ablate::Parameter* p : f.store->all()) CHECK((p->value.rows == 20 || p->value.cols == 20));
  }
}

TEST_CASE(
    "ffn/swiglu: match_params gives hidden 4*int(2d/3) = 256 for d = 96, as many weights as relu") {
  const auto d = ptest::dims(96, 8, 128, false);
  auto swiglu = ptest::build<Ffn>("{type: swiglu}", d);
  auto relu = ptest::build<Ffn>("{type: relu}", d);
  REQUIRE(swiglu.store->all().size() == 3);
  for (ablate::Parameter* p : swiglu.store->all())
    CHECK((p->value.rows == 256 || p->value.cols == 256));
  CHECK(swiglu.store->count() == 3 * 96 * 256);
  CHECK(relu.store->count() == 2 * 96 * 384);
  CHECK(swiglu.store->count() == relu.store->count());  // 73,728 each: the rule is exact when 3 | d

  // d = 64: H = 4 * 42 = 168, a few weights short of relu's 2*64*256.
  auto s64 = ptest::build<Ffn>("{type: swiglu}", ptest::dims(64, 8, 128, false));
  CHECK(s64.store->count() == 3 * 64 * 168);

  auto wide = ptest::build<Ffn>("{type: swiglu, match_params: false}", d);
  CHECK(wide.store->count() == 3 * 96 * 384);
  auto geglu = ptest::build<Ffn>("{type: geglu}", d);
  CHECK(geglu.store->count() == 3 * 96 * 256);
}

TEST_CASE("ffn/relu: GPT-1 seed sizes (d 32, 4d hidden, biases) and known values") {
  auto f = ptest::build<Ffn>("{type: relu}", ptest::dims(32, 4, 64, true));
  CHECK(f.store->count() == 32 * 128 + 128 + 128 * 32 + 32);  // 8,352

  // Hand-made weights: C = 2, H = 2. y = relu(x W1 + b1) W2 + b2.
  auto g2 = ptest::build<Ffn>("{type: relu, hidden: 2}", ptest::dims(2, 1, 4, true));
  auto& ps = g2.store->all();
  REQUIRE(ps.size() == 4);
  const float w1[] = {1, -1, 2, 0.5f}, b1[] = {0.1f, -0.2f}, w2[] = {1, 2, 3, 4},
              b2[] = {0.5f, -0.5f};
  std::copy(w1, w1 + 4, ps[0]->value.data);
  std::copy(b1, b1 + 2, ps[1]->value.data);
  std::copy(w2, w2 + 4, ps[2]->value.data);
  std::copy(b2, b2 + 2, ps[3]->value.data);
  // x = (1, 1): h = relu(1 + 2 + 0.1, -1 + 0.5 - 0.2) = (3.1, 0); y = (3.1 + 0.5, 6.2 - 0.5).
  const std::vector<float> y = run(*g2.obj, {1.0f, 1.0f}, 1, 2);
  CHECK(y[0] == doctest::Approx(3.6));
  CHECK(y[1] == doctest::Approx(5.7));
}

TEST_CASE("ffn/relu2: relu's parameters, squared activations, known values") {
  const auto d = ptest::dims(32, 4, 64, true);
  CHECK(ptest::build<Ffn>("{type: relu2}", d).store->count() ==
        ptest::build<Ffn>("{type: relu}", d).store->count());
  // The weights of the relu test above: h = relu(3.1, -0.7)^2 = (9.61, 0);
  // y = (9.61 + 0.5, 19.22 - 0.5).
  auto g2 = ptest::build<Ffn>("{type: relu2, hidden: 2}", ptest::dims(2, 1, 4, true));
  auto& ps = g2.store->all();
  REQUIRE(ps.size() == 4);
  const float w1[] = {1, -1, 2, 0.5f}, b1[] = {0.1f, -0.2f}, w2[] = {1, 2, 3, 4},
              b2[] = {0.5f, -0.5f};
  std::copy(w1, w1 + 4, ps[0]->value.data);
  std::copy(b1, b1 + 2, ps[1]->value.data);
  std::copy(w2, w2 + 4, ps[2]->value.data);
  std::copy(b2, b2 + 2, ps[3]->value.data);
  const std::vector<float> y = run(*g2.obj, {1.0f, 1.0f}, 1, 2);
  CHECK(y[0] == doctest::Approx(10.11));
  CHECK(y[1] == doctest::Approx(18.72));
}

TEST_CASE("ffn/gelu: approximate tanh and none differ slightly, other values rejected") {
  const auto d = ptest::dims(8, 2, 16, false);
  auto t = ptest::build<Ffn>("{type: gelu}", d);
  auto n = ptest::build<Ffn>("{type: gelu, approximate: none}", d);
  ptest::randomize(*t.store, 3, 1.0f);
  ptest::randomize(*n.store, 3, 1.0f);
  const auto x = ptest::randn(16, 4);
  const auto yt = run(*t.obj, x, 2, 8), yn = run(*n.obj, x, 2, 8);
  double diff = 0;
  for (size_t i = 0; i < yt.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(yt[i] - yn[i])));
  CHECK(diff > 0);
  CHECK(diff < 0.1);
  CHECK_THROWS_AS(ptest::build<Ffn>("{type: gelu, approximate: erf}", d), ablate::ConfigError);
}
