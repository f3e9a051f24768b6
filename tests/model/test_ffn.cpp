// Conformance of every "ffn" variant (shapes, determinism, gradients, options), plus the
// gated FFNs' hidden width rule of REFERENCE.md item 3, known values of relu and relu2, and the
// sparse mixture of experts against a dense reference.
#include <doctest/doctest.h>

#include <numeric>

#include "ablate/ffn.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

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
    for (ablate::Parameter* p : f.store->all())
      if (!ablate::test::contains(p->name, "router"))  // a mixture's router: (C, experts)
        CHECK((p->value.rows == 20 || p->value.cols == 20));
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

TEST_CASE("ffn/moe: each token runs through its top_k experts only, as a dense reference says") {
  const int64_t C = 12, H = 8, E = 4, k = 2, N = 10;
  const std::vector<float> x = ptest::randn(static_cast<size_t>(N * C), 21);
  for (bool normalize : {true, false}) {
    INFO("normalize " << normalize);
    auto m = ptest::build<Ffn>(
        "{type: moe, experts: 4, top_k: 2, hidden: 8, balance_weight: 0.5, "
        "normalize: " +
            std::string(normalize ? "true" : "false") + "}",
        ptest::dims(C, 2, 16, true));
    ptest::randomize(*m.store, 3, 0.5f);
    const auto& ps = m.store->all();
    REQUIRE(ps.size() == 1 + 4 * E);  // router, then each expert's up, up bias, down, down bias
    ablate::Graph g;
    ablate::Var y = m->forward(g, g.constant(x.data(), N, C));
    const std::vector<float> got = ptest::values(g, y);

    // The reference in double: every expert on every token, kept where the router chose it.
    auto at = [&](int i, int64_t r, int64_t c) {
      const ablate::Tensor& t = ps[static_cast<size_t>(i)]->value;
      return static_cast<double>(t.data[r * t.cols + c]);
    };
    std::vector<double> P(E, 0.0);
    std::vector<int> chosen_count(E, 0);
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> logit(E), p(E);
      for (int64_t e = 0; e < E; ++e) {
        logit[e] = 0;
        for (int64_t c = 0; c < C; ++c) logit[e] += x[n * C + c] * at(0, c, e);
      }
      const double top = *std::max_element(logit.begin(), logit.end());
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += std::exp(logit[e] - top);
      for (int64_t e = 0; e < E; ++e) P[e] += (p[e] = std::exp(logit[e] - top) / z) / N;
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return logit[a] > logit[b]; });
      double wz = 0;
      for (int j = 0; j < k; ++j) wz += std::exp(logit[order[j]] - logit[order[0]]);
      for (int64_t c = 0; c < C; ++c) {
        double want = 0;
        for (int j = 0; j < k; ++j) {
          const int e = order[j];
          const double w = normalize ? std::exp(logit[e] - logit[order[0]]) / wz : p[e];
          const int base = 1 + 4 * e;
          double out = at(base + 3, 0, c);
          for (int64_t h = 0; h < H; ++h) {
            double a = at(base + 1, 0, h);
            for (int64_t i = 0; i < C; ++i) a += x[n * C + i] * at(base, i, h);
            out += std::max(a, 0.0) * at(base + 2, h, c);
          }
          want += w * out;
        }
        CHECK(got[n * C + c] == doctest::Approx(want).epsilon(1e-4));
      }
      for (int j = 0; j < k; ++j) ++chosen_count[order[j]];
    }
    // Sparse: the experts' up-projections saw N * k rows in all, not N * E.
    int64_t expert_rows = 0;
    for (int id = 0; id < static_cast<int>(g.num_nodes()); ++id)
      if (std::string(g.node(id).op) == "linear" && g.node(id).value.cols == H)
        expert_rows += g.node(id).value.rows;
    CHECK(expert_rows == N * k);
    // The load-balancing term (E * sum_e f_e P_e) and the busiest expert's load, per layer.
    REQUIRE(g.aux().size() == 2);
    CHECK(g.aux()[0].name == "moe_balance");
    CHECK(g.aux()[0].weight == 0.5f);
    CHECK(g.aux()[0].layer == 0);
    double balance = 0;
    for (int64_t e = 0; e < E; ++e) balance += E * (chosen_count[e] / double(N * k)) * P[e];
    CHECK(g.value(g.aux()[0].value).data[0] == doctest::Approx(balance).epsilon(1e-5));
    CHECK(g.aux()[1].name == "moe_max_load");
    CHECK(g.aux()[1].weight == 0.0f);
    CHECK(g.value(g.aux()[1].value).data[0] ==
          doctest::Approx(E * *std::max_element(chosen_count.begin(), chosen_count.end()) /
                          double(N * k)));
  }
}

TEST_CASE("ffn/moe: top_k larger than experts is an error naming the file, line and both values") {
  ablate::test::TempDir d;
  const std::string out =
      ablate::test::run_with_bad_model_option(d, "ffn", "{type: moe, experts: 4, top_k: 5}");
  CHECK(ablate::test::contains(out, "bad.yaml:10:"));
  CHECK(ablate::test::contains(out, "model.ffn.top_k"));
  CHECK(ablate::test::contains(out, "top_k 5 is larger than experts 4"));
}
