// Conformance of every "qk_transform" variant (shapes, each head of each row on its own,
// determinism, gradients, options); QK-norm's values (unit RMS per head, gains, values left
// alone) and what it is for (attention no longer depends on the scale of a head's queries or
// keys); a run with QK-norm trains and generates, its Hugging Face export is refused naming
// the transform, and a bad transform names the file and line. The attention checks with
// every variant (KV-cache decoding included) are in test_attention.cpp.
#include <doctest/doctest.h>

#include <cmath>

#include "ablate/attention.hpp"
#include "ablate/qk_transform.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

using ablate::Attention;
using ablate::QkTransform;

TEST_CASE("qk_transform/conformance: every variant, with n_kv_heads = n_heads and 1") {
  ptest::check_conformance("qk_transform");
}

TEST_CASE("qk_transform/qk_norm: each head of q and k to RMS 1 times its gain, v unchanged") {
  const int64_t C = 12, NH = 3, HS = 4, NKV = 1, rows = 5;
  const auto d = ptest::dims(C, NH, 16);
  const auto q0 = ptest::randn(static_cast<size_t>(rows * C), 1, 3.0f);
  const auto k0 = ptest::randn(static_cast<size_t>(rows * NKV * HS), 2, 0.1f);
  const auto v0 = ptest::randn(static_cast<size_t>(rows * NKV * HS), 3);
  for (const char* gain : {"true", "false"}) {
    CAPTURE(gain);
    auto t = ptest::build<QkTransform>(std::string("{type: qk_norm, gain: ") + gain + "}", d);
    const bool learned = std::string(gain) == "true";
    CHECK(t.store->all().size() == (learned ? 2u : 0u));
    std::vector<float> gq(HS, 1.0f), gk(HS, 1.0f);
    if (learned) {
      CHECK(t.store->all()[0]->name == "p.q_norm.weight");
      CHECK(t.store->all()[1]->name == "p.k_norm.weight");
      for (int64_t j = 0; j < HS; ++j) {  // gains other than their initial 1
        t.store->all()[0]->value.data[j] = gq[static_cast<size_t>(j)] = 0.5f + j;
        t.store->all()[1]->value.data[j] = gk[static_cast<size_t>(j)] = 2.0f - 0.25f * j;
      }
    }
    ablate::Graph g;
    ablate::Var q = g.constant(q0.data(), rows, C), k = g.constant(k0.data(), rows, NKV * HS),
                v = g.constant(v0.data(), rows, NKV * HS);
    t->apply(g, q, k, v, ablate::QkvHeads{NH, NKV, HS, {nullptr, 1, rows}});
    const auto qv = ptest::values(g, q), kv = ptest::values(g, k), vv = ptest::values(g, v);
    CHECK(vv == v0);
    auto check_heads = [&](const std::vector<float>& in, const std::vector<float>& out,
                           int64_t heads, const std::vector<float>& gains) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t at = r * heads * HS + h * HS;
          double ss = 0;
          for (int64_t j = 0; j < HS; ++j) ss += double(in[at + j]) * in[at + j];
          const double rms = std::sqrt(ss / HS + 1e-6);
          for (int64_t j = 0; j < HS; ++j)
            CHECK(out[static_cast<size_t>(at + j)] ==
                  doctest::Approx(in[at + j] / rms * gains[static_cast<size_t>(j)]).epsilon(1e-5));
        }
    };
    check_heads(q0, qv, NH, gq);
    check_heads(k0, kv, NKV, gk);
  }
}

TEST_CASE("qk_transform/qk_norm in attention: the output ignores the scale of a head's q and k") {
  const int64_t C = 16, NH = 4, T = 6;
  const auto d = ptest::dims(C, NH, 16, false);
  const auto x = ptest::randn(static_cast<size_t>(T * C), 5);
  for (const char* t : {"none", "qk_norm"}) {
    CAPTURE(t);
    auto a = ptest::build<Attention>(
        std::string("{type: causal, n_kv_heads: 2, qk_transform: ") + t + "}", d);
    ptest::randomize(*a.store, 4, 0.3f);
    auto rope = ptest::build<ablate::PositionalEncoding>("{type: rope}", d);
    auto forward = [&] {
      ablate::Graph g;
      ablate::Batch in{nullptr, 1, T};
      in.positional = rope.obj.get();
      return ptest::values(g, a->forward(g, g.constant(x.data(), T, C), in));
    };
    const auto y0 = forward();
    // Query head 1's columns of the fused projection (C, C + 2*NKV*HS) times 8, key head 0's
    // times 0.2.
    ablate::Parameter* w = a.store->find("p.qkv.weight");
    REQUIRE(w != nullptr);
    for (int64_t r = 0; r < C; ++r) {
      for (int64_t c = 4; c < 8; ++c) w->value.data[r * w->value.cols + c] *= 8.0f;
      for (int64_t c = C; c < C + 4; ++c) w->value.data[r * w->value.cols + c] *= 0.2f;
    }
    const auto y1 = forward();
    double diff = 0;
    for (size_t i = 0; i < y0.size(); ++i) diff = std::max(diff, double(std::fabs(y0[i] - y1[i])));
    if (std::string(t) == "qk_norm") CHECK(diff < 1e-5);
    else CHECK(diff > 1e-3);
  }
}

TEST_CASE("qk_transform/cli: a QK-norm run trains and generates, Hugging Face export names it") {
  ablate::test::TempDir d;
  const std::string exp = d.write(
      "exp.yaml",
      std::string("name: qk\nseed: 3\ndata: {path: ") + ABLATE_TEST_DATA_DIR +
          "/shakespeare_16k.txt}\ntokenizer: byte\n"
          "model: {d_model: 32, n_heads: 4, n_layers: 1, context: 32, positional: rope, ffn: "
          "swiglu, norm: rmsnorm, head_bias: false,\n"
          "        attention: {type: causal, qkv_bias: false, out_bias: false, qk_transform: "
          "qk_norm}}\n"
          "train: {steps: 3, batch_size: 4, eval_every: 3, eval_batches: 1}\n"
          "optimizer: {type: adamw, lr: 1.0e-2}\nsample: {tokens: 0}\n");
  const std::string bin = ablate::test::ablate_binary();
  auto ran = ablate::test::run_command(bin + " run " + exp + " -o " + (d / "run") + " -q");
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  const std::string resolved = ablate::test::read_file(d / "run/config.resolved.yaml");
  CHECK(ablate::test::contains(resolved, "qk_transform:\n      type: qk_norm\n"));
  auto gen = ablate::test::run_command(bin + " generate " + (d / "run") +
                                       " --prompt ROMEO --tokens 8 --seed 1");
  INFO(gen.output);
  CHECK(gen.status == 0);
  auto ex =
      ablate::test::run_command(bin + " export " + (d / "run") + " --format hf -o " + (d / "hf"));
  INFO(ex.output);
  CHECK(ex.status != 0);
  CHECK(ablate::test::contains(
      ex.output, "model.attention.qk_transform.type is qk_norm; LlamaForCausalLM needs none"));
}

TEST_CASE("qk_transform/bad input: an unknown transform or option names the file and line") {
  ablate::test::TempDir d;
  auto run = [&](const std::string& value) {
    return ablate::test::run_with_bad_model_option(d, "attention", value);
  };
  const std::string unknown = run("{type: causal, qk_transform: qknorm}");
  CHECK(ablate::test::contains(unknown, "bad.yaml:10:"));
  CHECK(ablate::test::contains(unknown,
                               "model.attention.qk_transform.type: unknown qk_transform 'qknorm'"));
  CHECK(ablate::test::contains(unknown, "Available: none, qk_norm"));
  CHECK(ablate::test::contains(unknown, "Did you mean 'qk_norm'?"));
  const std::string key = run("{type: causal, qk_transform: {type: qk_norm, gian: false}}");
  CHECK(ablate::test::contains(key, "bad.yaml:10:"));
  CHECK(ablate::test::contains(key, "model.attention.qk_transform.gian"));
  CHECK(ablate::test::contains(key, "Did you mean 'gain'?"));
  const std::string eps = run("{type: causal, qk_transform: {type: qk_norm, eps: 5}}");
  CHECK(ablate::test::contains(eps, "model.attention.qk_transform.eps"));
}

TEST_CASE("qk_transform/the attention check names the custom ops its gradients went through") {
  ablate::conformance::Settings s;
  s.options_yaml = "{qk_transform: qk_norm}";
  const auto r = ablate::conformance::check_variant("attention", "causal", s);
  bool noted = false;
  for (const auto& c : r.checks) {
    INFO(c.name);
    CHECK_MESSAGE(c.passed, c.detail);
    if (c.name.find("finite differences") != std::string::npos)
      noted = c.detail.find("custom ops: head_rmsnorm") != std::string::npos;
  }
  CHECK(noted);
}

TEST_CASE(
    "qk_transform/value_embed: v gains its token's row of the table, and with qk_norm QK-norm") {
  const int64_t C = 12, NH = 3, HS = 4, NKV = 1, rows = 5;
  const auto d = ptest::dims(C, NH, 16);
  const auto q0 = ptest::randn(static_cast<size_t>(rows * C), 1, 3.0f);
  const auto k0 = ptest::randn(static_cast<size_t>(rows * NKV * HS), 2);
  const auto v0 = ptest::randn(static_cast<size_t>(rows * NKV * HS), 3);
  const int32_t ids[rows] = {4, 0, 4, 10, 7};
  auto t = ptest::build<QkTransform>("{type: value_embed}", d);
  REQUIRE(t.store->all().size() == 1);
  const ablate::Parameter& table = *t.store->all()[0];
  CHECK(table.name == "p.value_embed.weight");
  CHECK(table.value.rows == d.vocab_size);
  CHECK(table.role == ablate::Role::kEmbedding);
  ablate::Graph g;
  ablate::Var q = g.constant(q0.data(), rows, C), k = g.constant(k0.data(), rows, NKV * HS),
              v = g.constant(v0.data(), rows, NKV * HS);
  t->apply(g, q, k, v, ablate::QkvHeads{NH, NKV, HS, {ids, 1, rows}});
  CHECK(ptest::values(g, q) == q0);
  CHECK(ptest::values(g, k) == k0);
  const auto vv = ptest::values(g, v);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < NKV * HS; ++j)  // grouped-query heads: the first NKV * HS columns
      CHECK(vv[static_cast<size_t>(r * NKV * HS + j)] ==
            v0[static_cast<size_t>(r * NKV * HS + j)] + table.value.data[ids[r] * C + j]);
  // Without the ids (a probe without tokens) it says what it needs.
  ablate::Var v2 = g.constant(v0.data(), rows, NKV * HS);
  CHECK(ablate::test::contains(
      ablate::test::error_of([&] {
        t->apply(g, q, k, v2, ablate::QkvHeads{NH, NKV, HS, {nullptr, 1, rows}});
      }),
      "needs the token ids"));
  // With qk_norm: true, q and k are what the qk_norm transform makes of them (gains at 1).
  auto both = ptest::build<QkTransform>("{type: value_embed, qk_norm: true}", d);
  auto norm = ptest::build<QkTransform>("{type: qk_norm}", d);
  ablate::Graph g2;
  ablate::Var qa = g2.constant(q0.data(), rows, C), ka = g2.constant(k0.data(), rows, NKV * HS),
              va = g2.constant(v0.data(), rows, NKV * HS);
  ablate::Var qb = qa, kb = ka, vb = va;
  both->apply(g2, qa, ka, va, ablate::QkvHeads{NH, NKV, HS, {ids, 1, rows}});
  norm->apply(g2, qb, kb, vb, ablate::QkvHeads{NH, NKV, HS, {ids, 1, rows}});
  const auto a = ptest::values(g2, qa), b = ptest::values(g2, qb);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));
}
