// Conformance of every "attention" variant, alone and with every positional variant, with
// every q/k transform (conformance/attention.cpp: shapes, determinism, gradients, KV-cache
// decoding, weights, padding masks, options). Plus the causal mask, grouped-query heads, the
// bidirectional variant, padding masks and attention weights through the model (one KV cache
// and one weights buffer per layer, fewer an Error), and the GPT-1 seed's counts.
#include <doctest/doctest.h>

#include <memory>

#include "ablate/model.hpp"

#include "ablate/attention.hpp"
#include "ablate/ffn.hpp"
#include "ablate/norm.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

using ablate::Attention;
using ablate::Batch;
using ablate::PositionalEncoding;

namespace {

constexpr int64_t kC = 8, kNH = 2;

std::vector<float> run(Attention& a, PositionalEncoding* pos, const std::vector<float>& x,
                       int64_t B, int64_t T, float* weights = nullptr,
                       const uint8_t* key_mask = nullptr) {
  ablate::Graph g;
  std::vector<float*> w{weights};
  Batch in{nullptr, B, T};
  in.positional = pos;
  in.layer = 0;
  if (weights) in.attention_weights = &w;
  in.key_mask = key_mask;
  ablate::Var y = a.forward(g, g.constant(x.data(), B * T, kC), in);
  CHECK(g.value(y).rows == B * T);
  CHECK(g.value(y).cols == kC);
  return ptest::values(g, y);
}

}  // namespace

TEST_CASE(
    "attention/conformance: every variant with every positional encoding and every q/k "
    "transform") {
  for (const std::string& t : ptest::variants("qk_transform")) {
    CAPTURE(t);
    ablate::conformance::Settings s;
    s.options_yaml = "{qk_transform: " + t + "}";
    ptest::check_conformance("attention", s);
  }
}

TEST_CASE("attention/causal: output at t ignores later tokens, weights are lower triangular") {
  const int64_t T = 6;
  auto a = ptest::build<Attention>("{type: causal}", ptest::dims(kC, kNH, 16));
  ptest::randomize(*a.store, 2, 0.3f);
  auto x = ptest::randn(static_cast<size_t>(T * kC), 4);
  std::vector<float> w(static_cast<size_t>(kNH * T * T));
  // (Outputs compared bitwise come from the same kernel: asking for the weights selects
  // another one, whose exp and sums may round differently.)
  run(*a.obj, nullptr, x, 1, T, w.data());
  const auto y1 = run(*a.obj, nullptr, x, 1, T);
  for (int64_t c = 0; c < kC; ++c) x[static_cast<size_t>(3 * kC + c)] += 1.0f;
  const auto y2 = run(*a.obj, nullptr, x, 1, T);
  for (int64_t i = 0; i < 3 * kC; ++i)
    CHECK(y1[static_cast<size_t>(i)] == y2[static_cast<size_t>(i)]);
  CHECK(y1[3 * kC] != y2[3 * kC]);
  for (int64_t h = 0; h < kNH; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = i + 1; j < T; ++j)
        CHECK(w[static_cast<size_t>((h * T + i) * T + j)] == 0.0f);
  // The first query can only attend to itself.
  CHECK(w[0] == doctest::Approx(1.0));
}

TEST_CASE("attention/causal: ALiBi slopes change the result, RoPE too") {
  const int64_t T = 6;
  const auto d = ptest::dims(kC, kNH, 16);
  auto a = ptest::build<Attention>("{type: causal}", d);
  ptest::randomize(*a.store, 2, 0.3f);
  const auto x = ptest::randn(static_cast<size_t>(T * kC), 4);
  const auto plain = run(*a.obj, nullptr, x, 1, T);
  for (const char* p : {"alibi", "rope"}) {
    auto pos = ptest::build<PositionalEncoding>(ptest::type_yaml(p), d);
    const auto y = run(*a.obj, pos.obj.get(), x, 1, T);
    CHECK_MESSAGE(y[(T - 1) * kC] != plain[(T - 1) * kC], p);
    CHECK(y[0] == doctest::Approx(plain[0]));  // position 0 attends only to itself
  }
}

TEST_CASE("attention/causal: parameters, biases and the GPT-1 seed block of 12,608 parameters") {
  auto plain = ptest::build<Attention>("{type: causal}", ptest::dims(kC, kNH, 16, false));
  REQUIRE(plain.store->all().size() == 2);
  CHECK(plain.store->all()[0]->name == "p.qkv.weight");
  CHECK(plain.store->all()[0]->value.cols == 3 * kC);
  CHECK(plain.store->all()[1]->name == "p.proj.weight");
  CHECK(ptest::build<Attention>("{type: causal}", ptest::dims(kC, kNH, 16, true)).store->count() ==
        4 * kC * kC + 4 * kC);

  // REFERENCE.md item 1: d 32, 4 heads, q/k/v without bias, output projection with bias,
  // FFN 4d ReLU with biases, two LayerNorms with scale and shift.
  const auto d = ptest::dims(32, 4, 64, true);
  auto attn = ptest::build<Attention>("{type: causal, qkv_bias: false}", d);
  auto ffn = ptest::build<ablate::Ffn>("{type: relu}", d);
  auto n1 = ptest::build<ablate::Norm>("{type: layernorm}", d);
  auto n2 = ptest::build<ablate::Norm>("{type: layernorm}", d);
  CHECK(attn.store->count() == 3 * 32 * 32 + 32 * 32 + 32);
  CHECK(attn.store->count() + ffn.store->count() + n1.store->count() + n2.store->count() == 12608);

  CHECK(ptest::build<Attention>("{type: causal, out_bias: false}", d).store->count() ==
        4 * 32 * 32 + 3 * 32);
}

TEST_CASE("attention/causal: d_model must be divisible by n_heads") {
  try {
    ptest::build<Attention>("{type: causal}", ptest::dims(10, 4, 16));
    FAIL("accepted n_heads = 4 for d_model = 10");
  } catch (const ablate::ConfigError& e) {
    CHECK(std::string(e.what()).find("does not divide d_model = 10") != std::string::npos);
  }
}

TEST_CASE(
    "attention/gqa: n_kv_heads sizes K and V as NKV*HS, 1 is multi-query, must divide n_heads") {
  // C = 16, NH = 4, HS = 4: the fused projection is (C, C + 2*NKV*HS).
  const auto d = ptest::dims(16, 4, 16, false);
  for (int64_t nkv : {4, 2, 1}) {
    INFO("n_kv_heads " << nkv);
    auto a = ptest::build<Attention>("{type: causal, n_kv_heads: " + std::to_string(nkv) + "}", d);
    CHECK(a.store->count() == 16 * (16 + 2 * nkv * 4) + 16 * 16);
    CHECK(a->kv_width() == nkv * 4);
    CHECK(a->n_heads() == 4);
  }
  // 0 (the default) is plain multi-head attention, the same parameters as n_kv_heads = n_heads.
  CHECK(ptest::build<Attention>("{type: causal}", d).store->count() == 4 * 16 * 16);
  CHECK(ptest::build<Attention>("{type: bidirectional, n_kv_heads: 1}", d).store->count() ==
        16 * 24 + 16 * 16);
  try {
    ptest::build<Attention>("{type: causal, n_kv_heads: 3}", d);
    FAIL("accepted n_kv_heads = 3 with 4 heads");
  } catch (const ablate::ConfigError& e) {
    CHECK(std::string(e.what()).find("model.plugin.n_kv_heads") != std::string::npos);
    CHECK(std::string(e.what()).find("does not divide n_heads = 4") != std::string::npos);
  }
}

TEST_CASE(
    "attention/gqa: KV-cache decoding equals the full forward, with every head count and q/k "
    "transform") {
  const int64_t C = 16, NH = 4, T = 7;
  const auto d = ptest::dims(C, NH, 16, true);
  const auto x = ptest::randn(static_cast<size_t>(T * C), 8);
  for (const std::string& t : ptest::variants("qk_transform"))
    for (int64_t nkv : {1, 2, 4}) {
      INFO("n_kv_heads " << nkv << ", qk_transform " << t);
      auto a = ptest::build<Attention>(
          "{type: causal, n_kv_heads: " + std::to_string(nkv) + ", qk_transform: " + t + "}", d);
      ptest::randomize(*a.store, 3, 0.3f);
      auto rope = ptest::build<PositionalEncoding>("{type: rope}", d);
      std::vector<int32_t> ids(static_cast<size_t>(T));
      for (int64_t i = 0; i < T; ++i)
        ids[static_cast<size_t>(i)] = static_cast<int32_t>((5 * i + 2) % d.vocab_size);
      ablate::Graph g;
      Batch in{ids.data(), 1, T};
      in.positional = rope.obj.get();
      const auto full = ptest::values(g, a->forward(g, g.constant(x.data(), T, C), in));
      std::vector<ablate::KVCache> caches(1);
      caches[0].init(1, T, a->kv_width());
      CHECK(caches[0].width == nkv * (C / NH));
      ablate::NoGrad ng(g);
      for (int64_t t = 0; t < T; ++t) {
        g.reset();
        Batch step{ids.data() + t, 1, 1, t};
        step.positional = rope.obj.get();
        step.caches = &caches;
        step.layer = 0;
        const auto y = ptest::values(g, a->forward(g, g.constant(x.data() + t * C, 1, C), step));
        for (int64_t c = 0; c < C; ++c)
          CHECK(y[static_cast<size_t>(c)] ==
                doctest::Approx(full[static_cast<size_t>(t * C + c)]).epsilon(1e-4));
      }
    }
}

TEST_CASE("attention/bidirectional: differs from causal, sees the future, same parameters") {
  const int64_t T = 6;
  const auto d = ptest::dims(kC, kNH, 16);
  auto enc = ptest::build<Attention>("{type: bidirectional}", d);
  auto dec = ptest::build<Attention>("{type: causal}", d);
  REQUIRE(enc.store->count() == dec.store->count());
  ptest::randomize(*enc.store, 2, 0.3f);
  ptest::randomize(*dec.store, 2, 0.3f);  // same seed: the same weights
  for (size_t i = 0; i < enc.store->all().size(); ++i)
    REQUIRE(std::equal(enc.store->all()[i]->value.data,
                       enc.store->all()[i]->value.data + enc.store->all()[i]->value.numel(),
                       dec.store->all()[i]->value.data));
  auto x = ptest::randn(static_cast<size_t>(T * kC), 4);
  std::vector<float> we(static_cast<size_t>(kNH * T * T)), wd(we.size());
  const auto ye = run(*enc.obj, nullptr, x, 1, T, we.data());
  const auto yd = run(*dec.obj, nullptr, x, 1, T, wd.data());
  // The last position sees everything in both; earlier ones see more with the encoder.
  for (int64_t c = 0; c < kC; ++c)
    CHECK(ye[static_cast<size_t>((T - 1) * kC + c)] ==
          doctest::Approx(yd[static_cast<size_t>((T - 1) * kC + c)]));
  CHECK(ye[0] != doctest::Approx(yd[0]));
  // The first query attends to the last key.
  CHECK(we[T - 1] > 0.0f);
  CHECK(wd[T - 1] == 0.0f);
  // Changing the last token changes the encoder's first output.
  for (int64_t c = 0; c < kC; ++c) x[static_cast<size_t>((T - 1) * kC + c)] += 1.0f;
  const auto ye2 = run(*enc.obj, nullptr, x, 1, T);
  CHECK(ye2[0] != doctest::Approx(ye[0]));
  // ALiBi's bias is symmetric in the distance here: it changes the output, stays finite.
  auto alibi = ptest::build<PositionalEncoding>("{type: alibi}", d);
  const auto ya = run(*enc.obj, alibi.obj.get(), x, 1, T);
  for (float v : ya) CHECK(std::isfinite(v));
  CHECK(ya[0] != doctest::Approx(ye2[0]));
}

TEST_CASE(
    "attention/prefix_lm: the prompt reads itself whole, the rest is causal, scored_prefix finds "
    "the prompt") {
  const int64_t T = 6, P = 3;
  const auto d = ptest::dims(kC, kNH, 16);
  auto plm = ptest::build<Attention>("{type: prefix_lm}", d);
  auto dec = ptest::build<Attention>("{type: causal}", d);
  ptest::randomize(*plm.store, 2, 0.3f);
  ptest::randomize(*dec.store, 2, 0.3f);  // the same weights
  CHECK(plm.obj->causal());               // next_token accepts it: the prompt is never scored
  auto x = ptest::randn(static_cast<size_t>(T * kC), 4);
  auto forward = [&](Attention& a, const std::vector<float>& xs, const int32_t* prefix) {
    ablate::Graph g;
    Batch in{nullptr, 1, T};
    in.prefix = prefix;
    return ptest::values(g, a.forward(g, g.constant(xs.data(), T, kC), in));
  };
  const int32_t prompt = P;
  const auto y = forward(*plm.obj, x, &prompt);
  // Without a prefix it is the causal variant; the causal variant ignores a prefix.
  CHECK(forward(*plm.obj, x, nullptr) == forward(*dec.obj, x, nullptr));
  CHECK(forward(*dec.obj, x, &prompt) == forward(*dec.obj, x, nullptr));
  // Changing prompt token P-1 changes position 0 (it sees the whole prompt); changing
  // token P changes nothing before it.
  auto moved = [&](int64_t t) {
    std::vector<float> x2 = x;
    for (int64_t c = 0; c < kC; ++c) x2[static_cast<size_t>(t * kC + c)] += 1.0f;
    return forward(*plm.obj, x2, &prompt);
  };
  CHECK(moved(P - 1)[0] != doctest::Approx(y[0]));
  const auto after = moved(P);
  for (int64_t i = 0; i < P * kC; ++i)
    CHECK(after[static_cast<size_t>(i)] == y[static_cast<size_t>(i)]);
  CHECK(after[static_cast<size_t>(P * kC)] != doctest::Approx(y[static_cast<size_t>(P * kC)]));
  // scored_prefix: up to and including the first scored target per row; T if none is.
  const int32_t targets[3 * 4] = {-1, -1, 7, 8, /**/ 5, -1, 6, -1, /**/ -1, -1, -1, -1};
  std::vector<int32_t> prefix{9, 9, 9, 9, 9};  // refilled, not appended to
  ablate::scored_prefix(targets, 3, 4, prefix);
  CHECK(prefix == std::vector<int32_t>{3, 1, 4});
}

TEST_CASE(
    "attention/key_mask: padded keys are excluded, real tokens' outputs ignore padding content") {
  const int64_t B = 2, T = 6;
  const auto d = ptest::dims(kC, kNH, 16);
  for (const char* type : {"causal", "bidirectional"}) {
    INFO(type);
    auto a = ptest::build<Attention>(std::string("{type: ") + type + "}", d);
    ptest::randomize(*a.store, 2, 0.3f);
    // Sequence 0: 4 real tokens then 2 padding (right padding); sequence 1: 2 padding first.
    const std::vector<uint8_t> mask{1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
    auto x = ptest::randn(static_cast<size_t>(B * T * kC), 5);
    std::vector<float> w(static_cast<size_t>(B * kNH * T * T));
    const auto y1 = run(*a.obj, nullptr, x, B, T, w.data(), mask.data());
    for (int64_t r : {4, 5, 6, 7})
      for (int64_t c = 0; c < kC; ++c)
        x[static_cast<size_t>(r * kC + c)] = 100.0f * static_cast<float>(c + 1);
    const auto y2 = run(*a.obj, nullptr, x, B, T, nullptr, mask.data());
    for (int64_t r = 0; r < B * T; ++r)
      if (mask[static_cast<size_t>(r)])
        for (int64_t c = 0; c < kC; ++c)
          CHECK(y1[static_cast<size_t>(r * kC + c)] ==
                doctest::Approx(y2[static_cast<size_t>(r * kC + c)]));
    // A real query's weights on padded keys are exactly 0, and its row still sums to 1.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < kNH; ++h)
        for (int64_t i = 0; i < T; ++i) {
          if (!mask[static_cast<size_t>(b * T + i)]) continue;
          double sum = 0;
          for (int64_t j = 0; j < T; ++j) {
            const float p = w[static_cast<size_t>(((b * kNH + h) * T + i) * T + j)];
            if (!mask[static_cast<size_t>(b * T + j)]) CHECK(p == 0.0f);
            sum += p;
          }
          CHECK(sum == doctest::Approx(1.0));
        }
    // The bidirectional sequence 0 is the same function as the unpadded 4-token sequence.
    if (std::string(type) == "bidirectional") {
      const std::vector<float> x4(x.begin(), x.begin() + 4 * kC);
      const auto y4 = run(*a.obj, nullptr, x4, 1, 4);
      for (int64_t i = 0; i < 4 * kC; ++i)
        CHECK(y4[static_cast<size_t>(i)] ==
              doctest::Approx(y1[static_cast<size_t>(i)]).epsilon(1e-5));
    }
  }
}

TEST_CASE("attention/model: Batch key_mask and attention_weights reach every layer") {
  ptest::registry();
  for (const char* attn : {"causal", "bidirectional", "{type: causal, n_kv_heads: 1}"}) {
    INFO(attn);
    ablate::Options o = ptest::opts(
        std::string("{d_model: 16, n_heads: 4, n_layers: 2, context: 8, attention: ") + attn + "}",
        "model");
    ablate::Model m(o, 13, 1);
    const int64_t B = 2, T = 5, NH = 4, L = 2;
    const std::vector<int32_t> ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    std::vector<std::vector<float>> buf(
        L, std::vector<float>(static_cast<size_t>(B * NH * T * T), -1.0f));
    std::vector<float*> ptrs{buf[0].data(), buf[1].data()};
    const std::vector<uint8_t> mask{1, 1, 1, 0, 0, 1, 1, 1, 1, 1};
    ablate::Graph g;
    ablate::Batch a;
    a.ids = ids.data();
    a.batch = B;
    a.time = T;
    a.key_mask = mask.data();
    a.attention_weights = &ptrs;
    ablate::Var logits = m.forward(g, a);
    CHECK(g.value(logits).rows == B * T);
    const auto first = ptest::values(g, logits);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < 3; ++i) {
          double sum = 0;
          for (int64_t j = 0; j < T; ++j) {
            const float p =
                buf[static_cast<size_t>(l)][static_cast<size_t>(((0 * NH + h) * T + i) * T + j)];
            CHECK((p >= 0.0f && p <= 1.0f));
            if (j >= 3) CHECK(p == 0.0f);
            sum += p;
          }
          CHECK(sum == doctest::Approx(1.0));
        }
    // Changing the padded tokens leaves the real tokens' logits unchanged.
    std::vector<int32_t> ids2 = ids;
    ids2[3] = 11;
    ids2[4] = 12;
    a.ids = ids2.data();
    a.attention_weights = nullptr;
    g.reset();
    const auto second = ptest::values(g, m.forward(g, a));
    for (int64_t r : {0, 1, 2, 5, 6, 7, 8, 9})
      for (int64_t v = 0; v < 13; ++v)
        CHECK(first[static_cast<size_t>(r * 13 + v)] ==
              doctest::Approx(second[static_cast<size_t>(r * 13 + v)]).epsilon(1e-5));
  }
}

TEST_CASE(
    "attention/model: caches or attention-weight buffers fewer than the layers are an Error") {
  ptest::registry();
  ablate::Options o =
      ptest::opts("{d_model: 16, n_heads: 4, n_layers: 2, context: 8, attention: causal}", "model");
  ablate::Model m(o, 13, 1);
  const std::vector<int32_t> ids{1, 2, 3};
  ablate::Graph g;
  ablate::NoGrad ng(g);
  std::vector<ablate::KVCache> caches = m.make_caches(1, 8);
  caches.pop_back();  // one cache for two layers
  Batch a{ids.data(), 1, 3};
  a.caches = &caches;
  const std::string e = ablate::test::error_of([&] { m.forward(g, a); });
  CHECK(ablate::test::contains(e, "Batch::layer = 1 is outside the 1 entries of Batch::caches"));
  CHECK(ablate::test::contains(e, "Model::make_caches"));
  // With one cache per layer it decodes.
  caches = m.make_caches(1, 8);
  g.reset();
  CHECK(g.value(m.forward(g, a)).rows == 3);
  CHECK(caches[1].length == 3);
  // One attention-weights buffer for two layers.
  std::vector<float> w(static_cast<size_t>(4 * 3 * 3));
  std::vector<float*> buffers{w.data()};
  Batch b{ids.data(), 1, 3};
  b.attention_weights = &buffers;
  g.reset();
  CHECK(ablate::test::contains(ablate::test::error_of([&] { m.forward(g, b); }),
                               "outside the 1 entries of Batch::attention_weights"));
}
