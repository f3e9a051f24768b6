// Conformance of every "positional" variant (embed and rotate shapes, determinism,
// gradients, consistency with a start offset, length limit, options), plus known values:
// the sinusoidal table, RoPE's norm and relative-position properties, ALiBi's slopes.
#include <doctest/doctest.h>

#include "ablate/positional.hpp"
#include "plugin_test_util.hpp"

using ablate::Batch;
using ablate::PositionalEncoding;

namespace {

constexpr int64_t kC = 8, kNH = 2, kHS = 4, kNKV = 1;

std::vector<float> embed(PositionalEncoding& p, const std::vector<float>& x, int64_t B, int64_t T,
                         int64_t pos0) {
  ablate::Graph g;
  ablate::Var y = p.embed(g, g.constant(x.data(), B * T, kC), Batch{nullptr, B, T, pos0});
  CHECK(g.value(y).rows == B * T);
  CHECK(g.value(y).cols == kC);
  return ptest::values(g, y);
}

// Rotated q and k, concatenated.
std::vector<float> rotate(PositionalEncoding& p, const std::vector<float>& q,
                          const std::vector<float>& k, int64_t B, int64_t T, int64_t pos0,
                          int64_t NH = kNH, int64_t NKV = kNKV, int64_t HS = kHS) {
  ablate::Graph g;
  ablate::Var vq = g.constant(q.data(), B * T, NH * HS), vk = g.constant(k.data(), B * T, NKV * HS);
  p.rotate(g, vq, vk, Batch{nullptr, B, T, pos0}, NH, NKV, HS);
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

TEST_CASE(
    "positional/sinusoidal: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same)") {
  auto p = ptest::build<PositionalEncoding>("{type: sinusoidal}", ptest::dims(kC, kNH, 16));
  CHECK(p.store->count() == 0);
  CHECK(p->max_positions() == -1);
  const int64_t T = 6;
  const auto pe = embed(*p.obj, std::vector<float>(static_cast<size_t>(T * kC), 0.0f), 1, T, 0);
  for (int64_t pos = 0; pos < T; ++pos)
    for (int64_t i = 0; i < kC / 2; ++i) {
      const double angle = pos / std::pow(10000.0, 2.0 * i / kC);
      CHECK(pe[static_cast<size_t>(pos * kC + 2 * i)] ==
            doctest::Approx(std::sin(angle)).epsilon(1e-6));
      CHECK(pe[static_cast<size_t>(pos * kC + 2 * i + 1)] ==
            doctest::Approx(std::cos(angle)).epsilon(1e-6));
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
        CHECK(y[static_cast<size_t>((b * 3 + t) * kC + c)] ==
              doctest::Approx(1.0f + table.value.data[(4 + t) * kC + c]));
  CHECK_THROWS_AS(embed(*p.obj, std::vector<float>(static_cast<size_t>(3 * kC), 1.0f), 1, 3, 8),
                  ablate::Error);
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
  const auto q3 = at(3).first, k1 = at(1).second, q9 = at(9).first, k7 = at(7).second,
             q5 = at(5).first;
  CHECK(dot(q3, k1) == doctest::Approx(dot(q9, k7)).epsilon(1e-4));
  CHECK(std::fabs(dot(q3, k1) - dot(q5, k1)) > 1e-3);  // a different offset does matter
  // Position 0 is the identity; the first pair at position 1 turns by 1 radian.
  CHECK(at(0).first == u);
  const auto q1 = at(1).first;
  CHECK(q1[0] == doctest::Approx(u[0] * std::cos(1.0) - u[1] * std::sin(1.0)).epsilon(1e-5));
  CHECK(q1[1] == doctest::Approx(u[0] * std::sin(1.0) + u[1] * std::cos(1.0)).epsilon(1e-5));
  // Odd head sizes cannot be rotated pairwise.
  CHECK_THROWS_AS(ptest::build<PositionalEncoding>("{type: rope}", ptest::dims(6, 2, 16)),
                  ablate::ConfigError);
}

TEST_CASE("positional/alibi: slopes 2^(-8h/H), for H = 8 1/2, 1/4, ..., 1/256") {
  auto p = ptest::build<PositionalEncoding>("{type: alibi}", ptest::dims(16, 8, 16));
  CHECK(p.store->count() == 0);
  const float* s = p->attention_slopes();
  REQUIRE(s != nullptr);
  for (int h = 0; h < 8; ++h)
    CHECK(s[h] == doctest::Approx(1.0 / std::pow(2.0, h + 1)).epsilon(1e-7));
  auto p4 = ptest::build<PositionalEncoding>("{type: alibi}", ptest::dims(16, 4, 16));
  CHECK(p4->attention_slopes()[0] == doctest::Approx(0.25));
  CHECK(p4->attention_slopes()[3] == doctest::Approx(1.0 / 256));
}

TEST_CASE(
    "positional/place_value: each prompt digit gets the row of its place relative to the point") {
  // small_vocab: "0" "1" "2" "." "+" "=" "7" "8" "9" "x" "\n" (ids 0-10).
  auto p = ptest::build<PositionalEncoding>("{type: place_value, integers: 3, decimals: 2}",
                                            ptest::dims(kC, kNH, 16));
  REQUIRE(p.store->all().size() == 2);
  ablate::Parameter& table = *p.store->all()[0];
  ablate::Parameter& places = *p.store->all()[1];
  CHECK(table.name == "p.weight");
  CHECK(places.name == "p.places");
  REQUIRE(places.value.rows == 2 + 2 + 3);  // other, point, places -2 .. 2
  // Column 0 of a place row is its index, of a position row 0: the output's column 0 of
  // zero inputs is then the row each token got.
  std::fill(table.value.data, table.value.data + table.value.numel(), 0.0f);
  for (int64_t r = 0; r < places.value.rows; ++r) places.value.data[r * kC] = static_cast<float>(r);
  const int32_t other = 0, point = 1;
  auto place = [](int64_t v) { return static_cast<int32_t>(2 + 2 + v); };
  auto rows_of = [&](const std::vector<int32_t>& ids, int64_t B, int64_t T, const int32_t* prefix,
                     int64_t pos0 = 0) {
    ablate::Graph g;
    const std::vector<float> x(static_cast<size_t>(B * T * kC), 0.0f);
    const auto y =
        ptest::values(g, p->embed(g, g.constant(x.data(), B * T, kC),
                                  Batch{ids.data(), B, T, pos0, /*key_mask=*/nullptr, prefix}));
    std::vector<int32_t> r;
    for (int64_t i = 0; i < B * T; ++i)
      r.push_back(static_cast<int32_t>(y[static_cast<size_t>(i * kC)]));
    return r;
  };
  // Row 0 "12.7+80=9" with a prompt of 8 (the 9 is the answer); row 1 "9.81+2=17", 7.
  const std::vector<int32_t> ids = {1, 2, 3, 6, 4, 7, 0, 5, 8, 8, 3, 7, 1, 4, 2, 5, 1, 6};
  const std::vector<int32_t> prompts = {8, 7};
  CHECK(rows_of(ids, 2, 9, prompts.data()) ==
        std::vector<int32_t>{place(1), place(0), point, place(-1), other, place(1), place(0), other,
                             other,  // "9" of the answer
                             place(0), point, place(-1), place(-2), other, place(0), other, other,
                             other});
  // The same digits past the prompt, or without one, get the other row: nothing reads ahead.
  CHECK(rows_of(ids, 2, 9, nullptr) == std::vector<int32_t>(18, other));
  CHECK(rows_of(ids, 2, 9, std::vector<int32_t>{0, 0}.data()) == std::vector<int32_t>(18, other));
  // A run cut by the prompt's end counts its places from the cut: "12" of "12.7" with a
  // prompt of 2 is tens and units, as if the point had not come yet.
  const std::vector<int32_t> cut = {2};
  CHECK(rows_of({1, 2, 3, 6}, 1, 4, cut.data()) ==
        std::vector<int32_t>{place(1), place(0), other, other});
  // Places beyond the table share its last rows: in "1227.222.1" the thousands clamp to
  // the hundreds' row (3 rows of integers), places past -2 to -2; a second point is other.
  const std::vector<int32_t> long_ids = {1, 2, 2, 6, 3, 2, 2, 2, 3, 1};
  const std::vector<int32_t> all = {10};
  CHECK(rows_of(long_ids, 1, 10, all.data()) ==
        std::vector<int32_t>{place(2), place(2), place(1), place(0), point, place(-1), place(-2),
                             place(-2), other, place(-2)});
  // Windows after the prompt (KV-cache decoding, pos0 > 0) get the other row.
  CHECK(rows_of({1, 2}, 1, 2, nullptr, 9) == std::vector<int32_t>{other, other});
  // Without absolute positions only the place table is left, and no length limit.
  auto q = ptest::build<PositionalEncoding>("{type: place_value, absolute: false}",
                                            ptest::dims(kC, kNH, 16));
  CHECK(q.store->all().size() == 1);
  CHECK(q->max_positions() == -1);
  CHECK(p->max_positions() == 16);
}

TEST_CASE(
    "positional/place_value: bad options and a vocabulary without digits are errors naming the "
    "fix") {
  using ablate::ConfigError;
  CHECK_THROWS_WITH_AS(ptest::build<PositionalEncoding>("{type: place_value, digits: \"\"}"),
                       doctest::Contains("digit characters"), ConfigError);
  CHECK_THROWS_WITH_AS(ptest::build<PositionalEncoding>("{type: place_value, point: \"1\"}"),
                       doctest::Contains("not both"), ConfigError);
  CHECK_THROWS_WITH_AS(ptest::build<PositionalEncoding>("{type: place_value, digits: \"abc\"}"),
                       doctest::Contains("tokenizer: char"), ConfigError);
  CHECK_THROWS_WITH_AS(ptest::build<PositionalEncoding>("{type: place_value, integers: 0}"),
                       doctest::Contains("integers"), ConfigError);
  // Without a vocabulary (a Model built without token texts) it says what to pass.
  ablate::ParamStore store(1);
  CHECK_THROWS_WITH_AS(ptest::registry().create<PositionalEncoding>(
                           ptest::opts("{type: place_value}", "model.positional"),
                           ablate::BuildContext{ptest::dims(), ablate::ParamScope(store, ""), 1}),
                       doctest::Contains("token texts"), ConfigError);
}
