// The seed models of REFERENCE.md as experiments (experiments/models/*.yaml): the post-norm
// GPT-1 model has exactly 44,487 parameters with V = 71; the SwiGLU twin of the pre-norm
// baseline has its parameter count; every model file builds.
#include <doctest/doctest.h>

#include <filesystem>

#include <tbb/global_control.h>
#include <tbb/info.h>

#include <cstring>

#include "ablate/experiment.hpp"
#include "ablate/conformance.hpp"
#include "ablate/model.hpp"
#include "test_util.hpp"

namespace {

std::string model_file(const std::string& name) {
  return std::string(ABLATE_SOURCE_DIR) + "/experiments/models/" + name + ".yaml";
}

int64_t params(const std::string& name, int64_t vocab) {
  ablate::test::registry();
  const ablate::Experiment e = ablate::Experiment::load(model_file(name));
  const ablate::Model m(e.root().child("model"), vocab, 1);
  return m.n_params();
}

}  // namespace

TEST_CASE(
    "models/gpt1_postnorm: 44,487 parameters with V = 71 (2,272 + 2,048 + 3 x 12,608 + 2,343)") {
  CHECK(params("gpt1_postnorm", 71) == 44487);
  CHECK(params("gpt1_postnorm", 66) ==
        44487 - 2 * 5 * 32 - 5);  // tiny Shakespeare: 65 characters + unknown = 44,162
}

TEST_CASE("models/prenorm: the SwiGLU twin has exactly the baseline's parameters (V = 65)") {
  const int64_t relu = params("prenorm_baseline", 65), swiglu = params("prenorm_swiglu", 65);
  CHECK(relu == swiglu);
  // 8 blocks of 4*96^2 (attention) + 2*96*384 (FFN) + 2*2*96 (norms), embeddings, final norm, head.
  CHECK(relu == 8 * (4 * 96 * 96 + 2 * 96 * 384 + 4 * 96) + 65 * 96 + 128 * 96 + 2 * 96 + 96 * 65);
}

TEST_CASE(
    "models/gpt2_openwebtext: GPT-2 small's 124,439,808 parameters (tied head, no head bias)") {
  // wte 50,257 x 768 + wpe 1,024 x 768 + 12 x 7,087,872 (ln_1, c_attn, c_proj, ln_2, c_fc,
  // mlp.c_proj) + ln_f
  CHECK(params("gpt2_openwebtext", 50257) == 50257 * 768 + 1024 * 768 + 12 * 7087872 + 2 * 768);
}

TEST_CASE("models/every experiments/models file parses and builds its model") {
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(std::string(ABLATE_SOURCE_DIR) +
                                                           "/experiments/models")) {
    if (f.path().extension() != ".yaml") continue;
    INFO(f.path().string());
    CHECK(params(f.path().stem().string(), 100) > 0);
    ++n;
  }
  CHECK(n >= 5);
}

TEST_CASE("models/decoding with KV caches on two threads gives one thread's logits, bitwise") {
  // Two threads split each matrix-vector product's reduction into two fixed halves; one
  // thread computes the same halves itself. (d_model 96: the products split, gemv_splits;
  // smaller models decode on one thread.)
  if (tbb::info::default_concurrency() < 2) {
    MESSAGE("one core: no second thread to compare");
    return;
  }
  ablate::test::registry();
  for (const char* yaml : {"{d_model: 96, n_heads: 4, n_layers: 2, context: 12, bias: true, "
                           "positional: learned, ffn: relu,"
                           " block: prenorm, norm: layernorm}",
                           "{d_model: 96, n_heads: 4, n_layers: 3, context: 12, positional: "
                           "sinusoidal, attention: {type: causal, n_kv_heads: 1},"
                           " ffn: swiglu, block: postnorm, norm: rmsnorm}",
                           "{d_model: 96, n_heads: 6, n_layers: 2, context: 12, positional: rope, "
                           "attention: {type: causal, n_kv_heads: 3},"
                           " ffn: gelu, norm: {type: layernorm}}",
                           "{d_model: 96, n_heads: 4, n_layers: 2, context: 12, positional: rope, "
                           "blocks: [parallel, sandwich], ffn: swiglu}",
                           "{d_model: 96, n_heads: 4, n_layers: 2, context: 12, positional: rope, "
                           "attention: {type: causal, n_kv_heads: 2, qk_transform: qk_norm},"
                           " head: softcap}"}) {
    CAPTURE(yaml);
    YAML::Node n = YAML::Load(yaml);
    ablate::Model model(ablate::Options(n, std::make_shared<ablate::ConfigSource>(), "model"), 23,
                        5);
    ablate::conformance::randomize(model.params(), 7, 0.3f);
    for (int64_t batch : {1, 3}) {
      CAPTURE(batch);
      // A prefill of 2 tokens, then one token a step: every step's logits.
      auto decode = [&] {
        std::vector<float> logits;
        auto caches = model.make_caches(batch, 12);
        ablate::Graph g;
        ablate::NoGrad ng(g);
        for (int64_t t = 0; t < 10;) {
          const int64_t len = t == 0 ? 2 : 1;
          std::vector<int32_t> ids(static_cast<size_t>(batch * len));
          for (size_t i = 0; i < ids.size(); ++i)
            ids[i] = static_cast<int32_t>((7 * (i + 3 * static_cast<size_t>(t))) % 23);
          g.reset();
          ablate::Batch a;
          a.ids = ids.data();
          a.batch = batch;
          a.time = len;
          a.pos0 = t;
          a.caches = &caches;
          const ablate::Tensor y = g.value(model.forward(g, a));
          logits.insert(logits.end(), y.data, y.data + y.numel());
          t += len;
        }
        return logits;
      };
      const std::vector<float> two = decode();
      std::vector<float> one;
      {
        tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 1);
        one = decode();
      }
      REQUIRE(two.size() == one.size());
      CHECK(std::memcmp(two.data(), one.data(), sizeof(float) * two.size()) == 0);
    }
  }
}
