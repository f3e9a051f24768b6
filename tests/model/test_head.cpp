// Conformance of every "head" variant (tied and untied, with and without a bias: shapes,
// rows on their own, determinism, gradients, options); the softcap head's values and its
// hand-written backward; the head inside a model (the default is the linear head, decoding
// with KV caches gives the full forward's logits); a run with a softcap head generates, and
// its export to Hugging Face is refused naming the head; bad input names the file and line.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "ablate/head.hpp"
#include "ablate/model.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

using ablate::Head;

namespace {

// A head as the model builds it: the token embedding first in its store, tied or not.
struct TiedHead {
  std::unique_ptr<ablate::ParamStore> store;
  ablate::Parameter* embedding = nullptr;
  std::unique_ptr<Head> obj;
};

TiedHead build_head(const std::string& yaml, const ablate::ModelDims& d, bool tied) {
  TiedHead h;
  h.store = std::make_unique<ablate::ParamStore>(7);
  h.embedding = &h.store->add("tok_emb.weight", d.vocab_size, d.d_model, ablate::Role::kEmbedding);
  ablate::BuildContext c{d, ablate::ParamScope(*h.store, "head."), 7};
  c.tied_embedding = tied ? h.embedding : nullptr;
  h.obj = ptest::registry().create<Head>(ptest::opts(yaml, "model.head"), c);
  ablate::initialise_default(*h.store, d);
  ptest::randomize(*h.store, 3, 1.0f);
  return h;
}

std::vector<float> logits(Head& h, const std::vector<float>& x, int64_t rows, int64_t C) {
  ablate::Graph g;
  return ptest::values(g, h.forward(g, g.constant(x.data(), rows, C)));
}

ablate::Model model_of(const std::string& yaml, int64_t vocab = 13) {
  ablate::test::registry();
  YAML::Node n = YAML::Load(yaml);
  return ablate::Model(ablate::Options(n, std::make_shared<ablate::ConfigSource>(), "model"), vocab,
                       5);
}

std::vector<float> full_logits(ablate::Model& m, const std::vector<int32_t>& ids) {
  ablate::Graph g;
  ablate::NoGrad ng(g);
  ablate::Batch a;
  a.ids = ids.data();
  a.batch = 1;
  a.time = static_cast<int64_t>(ids.size());
  return ptest::values(g, m.forward(g, a));
}

}  // namespace

TEST_CASE("head/conformance: every variant, tied and untied, with and without a bias") {
  ptest::check_conformance("head");
}

TEST_CASE("head/softcap: cap * tanh(z / cap) of the linear head's z, bounded by cap") {
  const auto d = ptest::dims(12, 2, 16, true);
  const int64_t rows = 5, C = 12, V = d.vocab_size;
  const auto x = ptest::randn(static_cast<size_t>(rows * C), 4, 3.0f);
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    // Same seed, same parameters: the linear head's logits are softcap's z.
    auto lin = build_head("{type: linear}", d, tied);
    auto cap2 = build_head("{type: softcap, cap: 2}", d, tied);
    auto dflt = build_head("{type: softcap}", d, tied);
    REQUIRE(lin.store->count() == cap2.store->count());
    const auto z = logits(*lin.obj, x, rows, C);
    const auto y2 = logits(*cap2.obj, x, rows, C);
    const auto y30 = logits(*dflt.obj, x, rows, C);
    REQUIRE(z.size() == static_cast<size_t>(rows * V));
    double zmax = 0;
    for (size_t i = 0; i < z.size(); ++i) {
      zmax = std::max(zmax, std::fabs(static_cast<double>(z[i])));
      CHECK(y2[i] == doctest::Approx(2.0 * std::tanh(z[i] / 2.0)).epsilon(1e-6));
      CHECK(std::fabs(y2[i]) <= 2.0f);
      CHECK(y30[i] == doctest::Approx(30.0 * std::tanh(z[i] / 30.0)).epsilon(1e-6));
    }
    CHECK(zmax > 4.0);  // the cap of 2 bites
    CHECK(lin.obj->weight() == (tied ? nullptr : &lin.store->all()[1]->value));
  }
}

TEST_CASE("head/softcap: the hand-written backward agrees with finite differences") {
  // A small cap and large logits: tanh's slope varies, so a wrong factor is seen.
  const auto d = ptest::dims(8, 2, 16, true);
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    auto h = build_head("{type: softcap, cap: 1.5}", d, tied);
    ablate::ParamStore inputs(11);
    ablate::Parameter& xp = ablate::conformance::add_input(inputs, "x", 4, 8, 2.0f);
    std::vector<ablate::Parameter*> wrt = h.store->all();
    if (!tied) wrt.erase(wrt.begin());
    wrt.push_back(&xp);
    ptest::require_gradients(
        [&](ablate::Graph& g) { return ptest::Outputs{h.obj->forward(g, g.param(xp))}; }, wrt);
  }
}

TEST_CASE("head/model: linear is the default, softcap keeps the parameters and caps the logits") {
  const std::string base =
      "{d_model: 16, n_heads: 2, n_layers: 2, context: 8, positional: rope, bias: true";
  const std::vector<int32_t> ids = {1, 5, 9, 2, 12, 0};
  for (const char* tie : {"false", "true"}) {
    CAPTURE(tie);
    const std::string t = std::string(", tie_embeddings: ") + tie;
    ablate::Model plain = model_of(base + t + "}");
    ablate::Model linear = model_of(base + t + ", head: linear}");
    ablate::Model capped = model_of(base + t + ", head: {type: softcap, cap: 0.5}}");
    REQUIRE(plain.params().all().size() == capped.params().all().size());
    for (size_t i = 0; i < plain.params().all().size(); ++i) {
      const ablate::Parameter& a = *plain.params().all()[i];
      const ablate::Parameter& b = *capped.params().all()[i];
      CHECK(a.name == b.name);
      CHECK(std::memcmp(a.value.data, b.value.data, sizeof(float) * a.value.numel()) == 0);
    }
    CHECK((plain.lm_head_weight() == nullptr) == (std::string(tie) == "true"));
    CHECK(plain.params().find("head.bias") != nullptr);
    const auto z = full_logits(plain, ids);
    CHECK(z == full_logits(linear, ids));
    const auto y = full_logits(capped, ids);
    for (size_t i = 0; i < z.size(); ++i)
      CHECK(y[i] == doctest::Approx(0.5 * std::tanh(z[i] / 0.5)).epsilon(1e-6));
  }
}

TEST_CASE("head/model: decoding with KV caches gives the full forward's softcapped logits") {
  ablate::Model m = model_of(
      "{d_model: 96, n_heads: 4, n_layers: 2, context: 12, positional: rope, head: {type: "
      "softcap, cap: 1}}",
      23);
  ablate::conformance::randomize(m.params(), 9, 0.3f);
  const std::vector<int32_t> ids = {3, 7, 1, 22, 9, 4, 0, 15};
  const auto full = full_logits(m, ids);
  auto caches = m.make_caches(1, 12);
  ablate::Graph g;
  ablate::NoGrad ng(g);
  const int64_t V = 23;
  for (size_t t = 0; t < ids.size(); ++t) {
    g.reset();
    ablate::Batch a;
    a.ids = ids.data() + t;
    a.pos0 = static_cast<int64_t>(t);
    a.caches = &caches;
    const auto y = ptest::values(g, m.forward(g, a));
    for (int64_t v = 0; v < V; ++v) {
      CHECK(std::fabs(y[static_cast<size_t>(v)]) <= 1.0f);
      CHECK(y[static_cast<size_t>(v)] ==
            doctest::Approx(full[t * V + static_cast<size_t>(v)]).epsilon(1e-4));
    }
  }
}

TEST_CASE("head/cli: a softcap run trains and generates, Hugging Face export names the head") {
  ablate::test::TempDir d;
  const std::string exp = d.write(
      "exp.yaml", std::string("name: capped\nseed: 3\ndata: {path: ") + ABLATE_TEST_DATA_DIR +
                      "/shakespeare_16k.txt}\ntokenizer: byte\n"
                      "model: {d_model: 32, n_heads: 4, n_layers: 1, context: 32, positional: "
                      "learned, ffn: gelu, norm: layernorm, bias: true, head_bias: false,\n"
                      "        head: {type: softcap, cap: 5}}\n"
                      "train: {steps: 3, batch_size: 4, eval_every: 3, eval_batches: 1}\n"
                      "optimizer: {type: adamw, lr: 1.0e-2}\nsample: {tokens: 0}\n");
  const std::string bin = ablate::test::ablate_binary();
  auto ran = ablate::test::run_command(bin + " run " + exp + " -o " + (d / "run") + " -q");
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  CHECK(ablate::test::contains(ablate::test::read_file(d / "run/config.resolved.yaml"),
                               "head:\n    type: softcap\n    cap: 5"));
  auto gen = ablate::test::run_command(bin + " generate " + (d / "run") +
                                       " --prompt ROMEO --tokens 8 --seed 1");
  INFO(gen.output);
  CHECK(gen.status == 0);
  auto ex =
      ablate::test::run_command(bin + " export " + (d / "run") + " --format hf -o " + (d / "hf"));
  INFO(ex.output);
  CHECK(ex.status != 0);
  CHECK(ablate::test::contains(ex.output,
                               "model.head.type is softcap; GPT2LMHeadModel needs linear"));
  CHECK(ablate::test::contains(ex.output,
                               "model.head.type is softcap; LlamaForCausalLM needs linear"));
  // ablate's own names export, head and all.
  auto st = ablate::test::run_command(bin + " export " + (d / "run") + " --format safetensors -o " +
                                      (d / "w.safetensors"));
  INFO(st.output);
  CHECK(st.status == 0);
}

TEST_CASE("head/bad input: an unknown head or a bad cap names the file, line, value and choices") {
  ablate::test::TempDir d;
  auto run = [&](const std::string& value) {
    return ablate::test::run_with_bad_model_option(d, "head", value);
  };
  const std::string unknown = run("sofcap");
  CHECK(ablate::test::contains(unknown, "bad.yaml:10:"));
  CHECK(ablate::test::contains(unknown, "model.head.type: unknown head 'sofcap'"));
  CHECK(ablate::test::contains(unknown, "Available: linear, softcap"));
  CHECK(ablate::test::contains(unknown, "Did you mean 'softcap'?"));
  const std::string cap = run("{type: softcap, cap: -3}");
  CHECK(ablate::test::contains(cap, "bad.yaml:10:"));
  CHECK(ablate::test::contains(cap, "model.head.cap"));
  CHECK(ablate::test::contains(cap, "-3"));
  const std::string key = run("{type: softcap, capp: 3}");
  CHECK(ablate::test::contains(key, "model.head.capp"));
  CHECK(ablate::test::contains(key, "Did you mean 'cap'?"));
}

TEST_CASE("head/a head whose logits the objective does not read stops the run, naming both") {
  ablate::test::TempDir d;
  const std::string out = ablate::test::run_with_bad_model_option(
      d, "head", "wide_head", std::string("--plugin-dir ") + ABLATE_TEST_PLUGIN_DIR + "/wide_head");
  CHECK(ablate::test::contains(out, "bad.yaml:"));
  CHECK(ablate::test::contains(out, "model.head"));
  CHECK(ablate::test::contains(out,
                               "head 'wide_head' gives 512 logits per position, and "
                               "objective 'next_token' reads 256"));
  CHECK(ablate::test::contains(out, "they cannot combine"));
}
