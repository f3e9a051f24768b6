// Conformance of every "attention" variant, alone and with every positional variant:
// shapes, determinism, gradients, incremental decoding with a KV cache, attention weights,
// options. Plus the causal variant's mask, checks and the GPT-1 seed's parameter count.
#include <doctest/doctest.h>

#include <memory>

#include "ablate/attention.hpp"
#include "ablate/ffn.hpp"
#include "ablate/norm.hpp"
#include "plugin_test_util.hpp"

using ablate::Attention;
using ablate::AttentionInput;
using ablate::PositionalEncoding;

namespace {

constexpr int64_t kC = 8, kNH = 2;

std::vector<float> run(Attention& a, PositionalEncoding* pos, const std::vector<float>& x, int64_t B, int64_t T,
                       float* weights = nullptr, const uint8_t* key_mask = nullptr) {
  ablate::Graph g;
  AttentionInput in;
  in.pos = {B, T, 0};
  in.positional = pos;
  in.weights_out = weights;
  in.key_mask = key_mask;
  ablate::Var y = a.forward(g, g.constant(x.data(), B * T, kC), in);
  CHECK(g.value(y).rows == B * T);
  CHECK(g.value(y).cols == kC);
  return ptest::values(g, y);
}

// The positional variants to combine with, "" meaning none at all.
std::vector<std::string> positionals() {
  std::vector<std::string> p{""};
  for (const std::string& n : ptest::variants("positional")) p.push_back(n);
  return p;
}

}  // namespace

TEST_CASE("attention/conformance: every variant with every positional encoding") {
  const int64_t B = 2, T = 5;
  const auto d = ptest::dims(kC, kNH, 16);
  for (const std::string& name : ptest::variants("attention")) {
    for (const std::string& pname : positionals()) {
      INFO("attention '" << name << "' with positional '" << pname << "'");
      ptest::Built<PositionalEncoding> pos;
      if (!pname.empty()) pos = ptest::build<PositionalEncoding>(ptest::type_yaml(pname), d, 7, "model.positional");
      PositionalEncoding* pp = pos.obj.get();
      auto a = ptest::build<Attention>(ptest::type_yaml(name), d);
      auto b = ptest::build<Attention>(ptest::type_yaml(name), d);
      CHECK(a->n_heads() > 0);
      CHECK(a->kv_width() > 0);

      const auto x = ptest::randn(static_cast<size_t>(B * T * kC), 3);
      std::vector<float> w(static_cast<size_t>(B * a->n_heads() * T * T), -1.0f);
      const auto ya = run(*a.obj, pp, x, B, T, w.data());
      CHECK(ya == run(*a.obj, pp, x, B, T));
      CHECK(ya == run(*b.obj, pp, x, B, T));
      for (float v : ya) REQUIRE(std::isfinite(v));
      const std::vector<uint8_t> all_real(static_cast<size_t>(B * T), 1);
      CHECK(run(*a.obj, pp, x, B, T, nullptr, all_real.data()) == ya);  // a mask without padding changes nothing
      // Attention probabilities: each query's row sums to 1.
      for (int64_t r = 0; r < B * a->n_heads() * T; ++r) {
        double s = 0;
        for (int64_t j = 0; j < T; ++j) {
          const float p = w[static_cast<size_t>(r * T + j)];
          CHECK((p >= 0.0f && p <= 1.0f));
          s += p;
        }
        CHECK(s == doctest::Approx(1.0).epsilon(1e-5));
      }

      // Decoding one token at a time with a KV cache reproduces the full forward.
      {
        ablate::KVCache cache;
        cache.init(1, T, a->kv_width());
        ablate::Graph g;
        ablate::NoGrad ng(g);
        for (int64_t t = 0; t < T; ++t) {
          g.reset();
          AttentionInput in;
          in.pos = {1, 1, t};
          in.positional = pp;
          in.cache = &cache;
          ablate::Var y = a->forward(g, g.constant(x.data() + t * kC, 1, kC), in);
          const auto yt = ptest::values(g, y);
          for (int64_t c = 0; c < kC; ++c) CHECK(yt[static_cast<size_t>(c)] == doctest::Approx(ya[static_cast<size_t>(t * kC + c)]).epsilon(1e-4));
        }
        CHECK(cache.length == T);
      }

      ptest::randomize(*a.store, 5, 0.3f);
      ablate::ParamStore inputs(11);
      ablate::Parameter& xp = inputs.add("x", B * T, kC, ablate::Init::kNormal, 1.0f);
      std::vector<ablate::Parameter*> wrt = a.store->all();
      wrt.push_back(&xp);
      ptest::require_gradients(
          [&](ablate::Graph& g) {
            AttentionInput in;
            in.pos = {B, T, 0};
            in.positional = pp;
            return ptest::Outputs{a->forward(g, g.param(xp), in)};
          },
          wrt);
    }
    ptest::check_option_validation<Attention>("attention", name, d);
  }
}

TEST_CASE("attention/causal: output at t ignores later tokens; weights are lower triangular") {
  const int64_t T = 6;
  auto a = ptest::build<Attention>("{type: causal}", ptest::dims(kC, kNH, 16));
  ptest::randomize(*a.store, 2, 0.3f);
  auto x = ptest::randn(static_cast<size_t>(T * kC), 4);
  std::vector<float> w(static_cast<size_t>(kNH * T * T));
  const auto y1 = run(*a.obj, nullptr, x, 1, T, w.data());
  for (int64_t c = 0; c < kC; ++c) x[static_cast<size_t>(3 * kC + c)] += 1.0f;
  const auto y2 = run(*a.obj, nullptr, x, 1, T);
  for (int64_t i = 0; i < 3 * kC; ++i) CHECK(y1[static_cast<size_t>(i)] == y2[static_cast<size_t>(i)]);
  CHECK(y1[3 * kC] != y2[3 * kC]);
  for (int64_t h = 0; h < kNH; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = i + 1; j < T; ++j) CHECK(w[static_cast<size_t>((h * T + i) * T + j)] == 0.0f);
  // The first query can only attend to itself.
  CHECK(w[0] == doctest::Approx(1.0));
}

TEST_CASE("attention/causal: ALiBi slopes change the result; RoPE too") {
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
  CHECK(ptest::build<Attention>("{type: causal}", ptest::dims(kC, kNH, 16, true)).store->count() == 4 * kC * kC + 4 * kC);

  // REFERENCE.md item 1: d 32, 4 heads, q/k/v without bias, output projection with bias,
  // FFN 4d ReLU with biases, two LayerNorms with scale and shift.
  const auto d = ptest::dims(32, 4, 64, true);
  auto attn = ptest::build<Attention>("{type: causal, qkv_bias: false}", d);
  auto ffn = ptest::build<ablate::Ffn>("{type: relu}", d);
  auto n1 = ptest::build<ablate::Norm>("{type: layernorm}", d);
  auto n2 = ptest::build<ablate::Norm>("{type: layernorm}", d);
  CHECK(attn.store->count() == 3 * 32 * 32 + 32 * 32 + 32);
  CHECK(attn.store->count() + ffn.store->count() + n1.store->count() + n2.store->count() == 12608);

  CHECK(ptest::build<Attention>("{type: causal, out_bias: false}", d).store->count() == 4 * 32 * 32 + 3 * 32);
}

TEST_CASE("attention/causal: d_model must be divisible by n_heads") {
  try {
    ptest::build<Attention>("{type: causal}", ptest::dims(10, 4, 16));
    FAIL("accepted n_heads = 4 for d_model = 10");
  } catch (const ablate::ConfigError& e) {
    CHECK(std::string(e.what()).find("does not divide d_model = 10") != std::string::npos);
  }
}
