// Conformance of every "positional" variant (embed and rotate shapes, determinism,
// gradients, consistency with a start offset, length limit, options), plus known values:
// the sinusoidal table, RoPE's norm and relative-position properties, ALiBi's slopes.
#include <doctest/doctest.h>

#include "ablate/positional.hpp"
#include "plugin_test_util.hpp"

using ablate::PositionalEncoding;
using ablate::PosContext;

namespace {

constexpr int64_t kC = 8, kNH = 2, kHS = 4, kNKV = 1;

std::vector<float> embed(PositionalEncoding& p, const std::vector<float>& x, int64_t B, int64_t T, int64_t pos0) {
  ablate::Graph g;
  ablate::Var y = p.embed(g, g.constant(x.data(), B * T, kC), PosContext{B, T, pos0});
  CHECK(g.value(y).rows == B * T);
  CHECK(g.value(y).cols == kC);
  return ptest::values(g, y);
}

// Rotated q and k, concatenated.
std::vector<float> rotate(PositionalEncoding& p, const std::vector<float>& q, const std::vector<float>& k, int64_t B,
                          int64_t T, int64_t pos0, int64_t NH = kNH, int64_t NKV = kNKV, int64_t HS = kHS) {
  ablate::Graph g;
  ablate::Var vq = g.constant(q.data(), B * T, NH * HS), vk = g.constant(k.data(), B * T, NKV * HS);
  p.rotate(g, vq, vk, PosContext{B, T, pos0}, NH, NKV, HS);
  CHECK(g.value(vq).rows == B * T);
  CHECK(g.value(vq).cols == NH * HS);
  CHECK(g.value(vk).rows == B * T);
  CHECK(g.value(vk).cols == NKV * HS);
  std::vector<float> out = ptest::values(g, vq), kv = ptest::values(g, vk);
  out.insert(out.end(), kv.begin(), kv.end());
  return out;
}

std::vector<float> rows(const std::vector<float>& v, int64_t from, int64_t n, int64_t width) {
  return std::vector<float>(v.begin() + from * width, v.begin() + (from + n) * width);
}

}  // namespace

TEST_CASE("positional/conformance: every variant's hooks, gradients, offsets and options") {
  ptest::check_conformance("positional");
}

TEST_CASE("positional/sinusoidal: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same)") {
  auto p = ptest::build<PositionalEncoding>("{type: sinusoidal}", ptest::dims(kC, kNH, 16));
  CHECK(p.store->count() == 0);
  CHECK(p->max_positions() == -1);
  const int64_t T = 6;
  const auto pe = embed(*p.obj, std::vector<float>(static_cast<size_t>(T * kC), 0.0f), 1, T, 0);
  for (int64_t pos = 0; pos < T; ++pos)
    for (int64_t i = 0; i < kC / 2; ++i) {
      const double angle = pos / std::pow(10000.0, 2.0 * i / kC);
      CHECK(pe[static_cast<size_t>(pos * kC + 2 * i)] == doctest::Approx(std::sin(angle)).epsilon(1e-6));
      CHECK(pe[static_cast<size_t>(pos * kC + 2 * i + 1)] == doctest::Approx(std::cos(angle)).epsilon(1e-6));
    }
  // pos 5, i = 1, d = 8: 10000^(2/8) = 10, so sin(0.5) and cos(0.5).
  CHECK(pe[5 * kC + 2] == doctest::Approx(0.479425539).epsilon(1e-6));
  CHECK(pe[5 * kC + 3] == doctest::Approx(0.877582562).epsilon(1e-6));
  // Far positions work (no limit), and start offsets index the same table.
  const auto far = embed(*p.obj, std::vector<float>(kC, 0.0f), 1, 1, 100000);
  CHECK(far[0] == doctest::Approx(std::sin(100000.0)).epsilon(1e-4));
}

TEST_CASE("positional/learned: adds table rows pos0 + t, limited to the context") {
  auto p = ptest::build<PositionalEncoding>("{type: learned}", ptest::dims(kC, kNH, 10));
  REQUIRE(p.store->all().size() == 1);
  const ablate::Parameter& table = *p.store->all()[0];
  CHECK(table.value.rows == 10);
  CHECK(table.value.cols == kC);
  CHECK(p->max_positions() == 10);
  const auto y = embed(*p.obj, std::vector<float>(static_cast<size_t>(2 * 3 * kC), 1.0f), 2, 3, 4);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t c = 0; c < kC; ++c)
        CHECK(y[static_cast<size_t>((b * 3 + t) * kC + c)] == doctest::Approx(1.0f + table.value.data[(4 + t) * kC + c]));
  CHECK_THROWS_AS(embed(*p.obj, std::vector<float>(static_cast<size_t>(3 * kC), 1.0f), 1, 3, 8), ablate::Error);
}

TEST_CASE("positional/rope: preserves norms, q.k depends only on the relative position") {
  auto p = ptest::build<PositionalEncoding>("{type: rope}", ptest::dims(kC, kNH, 16));
  CHECK(p.store->count() == 0);
  const int64_t HS = 8;
  const auto u = ptest::randn(HS, 21), w = ptest::randn(HS, 22);
  // q and k at position `pos` (one head, one token): the rotated vectors.
  auto at = [&](int64_t pos) {
    const auto r = rotate(*p.obj, u, w, 1, 1, pos, 1, 1, HS);
    return std::make_pair(rows(r, 0, 1, HS), rows(r, 1, 1, HS));
  };
  auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
  };
  for (int64_t pos : {0, 1, 7, 1000}) {
    const auto [q, k] = at(pos);
    CHECK(dot(q, q) == doctest::Approx(dot(u, u)).epsilon(1e-5));
    CHECK(dot(k, k) == doctest::Approx(dot(w, w)).epsilon(1e-5));
  }
  const auto q3 = at(3).first, k1 = at(1).second, q9 = at(9).first, k7 = at(7).second, q5 = at(5).first;
  CHECK(dot(q3, k1) == doctest::Approx(dot(q9, k7)).epsilon(1e-4));
  CHECK(std::fabs(dot(q3, k1) - dot(q5, k1)) > 1e-3);  // a different offset does matter
  // Position 0 is the identity; the first pair at position 1 turns by 1 radian.
  CHECK(at(0).first == u);
  const auto q1 = at(1).first;
  CHECK(q1[0] == doctest::Approx(u[0] * std::cos(1.0) - u[1] * std::sin(1.0)).epsilon(1e-5));
  CHECK(q1[1] == doctest::Approx(u[0] * std::sin(1.0) + u[1] * std::cos(1.0)).epsilon(1e-5));
  // Odd head sizes cannot be rotated pairwise.
  CHECK_THROWS_AS(ptest::build<PositionalEncoding>("{type: rope}", ptest::dims(6, 2, 16)), ablate::ConfigError);
}

TEST_CASE("positional/alibi: slopes 2^(-8h/H), for H = 8 1/2, 1/4, ..., 1/256") {
  auto p = ptest::build<PositionalEncoding>("{type: alibi}", ptest::dims(16, 8, 16));
  CHECK(p.store->count() == 0);
  const float* s = p->attention_slopes();
  REQUIRE(s != nullptr);
  for (int h = 0; h < 8; ++h) CHECK(s[h] == doctest::Approx(1.0 / std::pow(2.0, h + 1)).epsilon(1e-7));
  auto p4 = ptest::build<PositionalEncoding>("{type: alibi}", ptest::dims(16, 4, 16));
  CHECK(p4->attention_slopes()[0] == doctest::Approx(0.25));
  CHECK(p4->attention_slopes()[3] == doctest::Approx(1.0 / 256));
}
