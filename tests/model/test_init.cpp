// The "init" family: every variant over parameters of every role (conformance checks of
// framework/model/src/families/init.cpp), gpt2
// reproducing the initial values ablate had before parameters had roles (bit for bit,
// against that scheme written out here from parameter names), and small_init's scales.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ablate/init.hpp"
#include "ablate/model.hpp"
#include "plugin_test_util.hpp"

using ablate::Role;

namespace {

constexpr Role kRoles[] = {Role::kEmbedding, Role::kPosition, Role::kHidden, Role::kResidualOut,
                           Role::kHead,      Role::kGain,     Role::kBias,   Role::kCustom};

// One parameter per role (16 x 24, biases and gains 1 x 24), initialised by `yaml`.
struct Initialised {
  ablate::ParamStore store;
  explicit Initialised(const std::string& yaml, uint64_t seed = 3) : store(seed) {
    for (Role r : kRoles) {
      const bool row = r == Role::kGain || r == Role::kBias;
      ablate::Parameter& p = store.add(ablate::role_name(r), row ? 1 : 16, 24, r);
      if (r == Role::kCustom) ablate::fill(p.value, 0.25f);  // the plugin's own value
    }
    auto init = ptest::registry().create<ablate::Initializer>(
        ptest::opts(yaml, "model.init"),
        ablate::BuildContext{ptest::dims(), ablate::ParamScope(store, ""), seed});
    ablate::initialise(store, *init);
  }
  std::vector<float> values(Role r) const {
    const ablate::Parameter& p = *store.all()[static_cast<size_t>(r)];
    return std::vector<float>(p.value.data, p.value.data + p.value.numel());
  }
  double rms(Role r) const {
    double s = 0;
    const auto v = values(r);
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s / static_cast<double>(v.size()));
  }
};

// A model built from `yaml` (model section), its parameters as created.
std::vector<ablate::Parameter*> model_params(ablate::Model& m) { return m.params().all(); }

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

TEST_CASE(
    "init/conformance: every variant sets finite values, deterministically, and leaves custom "
    "parameters alone") {
  ptest::check_conformance("init");
}

TEST_CASE(
    "init/gpt2: a model's initial weights are bitwise the GPT-2 draws in parameter creation "
    "order") {
  // The reference draws each parameter from the model's generator in creation order:
  // N(0, 0.02) for embeddings, positions, qkv/up/gate and the head; N(0, 0.02 / sqrt(2 L))
  // for the attention and FFN output projections; 1 for norm gains; 0 for biases.
  ptest::registry();
  for (const char* yaml :
       {"{d_model: 32, n_heads: 4, n_layers: 3, context: 16, bias: true, ffn: swiglu, norm: "
        "rmsnorm}",
        "{d_model: 24, n_heads: 2, n_layers: 2, context: 8, positional: learned, ffn: relu,"
        " norm: layernorm, block: postnorm, head_bias: true}",
        "{d_model: 16, n_heads: 2, n_layers: 5, context: 8, positional: rope, tie_embeddings: "
        "true, init: gpt2}"}) {
    CAPTURE(yaml);
    YAML::Node n = YAML::Load(yaml);
    ablate::Model m(ablate::Options(n, std::make_shared<ablate::ConfigSource>(), "model"), 13,
                    1234);
    const float residual = 0.02f / std::sqrt(2.0f * static_cast<float>(m.dims().n_layers));
    ablate::Rng rng(1234);
    int checked = 0;
    for (ablate::Parameter* p : model_params(m)) {
      CAPTURE(p->name);
      std::vector<float> want(static_cast<size_t>(p->value.numel()), 0.0f);
      if (ends_with(p->name, ".bias")) {
        // zeros
      } else if (p->name.find("norm") != std::string::npos) {
        std::fill(want.begin(), want.end(), 1.0f);
      } else {
        const float std = ends_with(p->name, "proj.weight") || ends_with(p->name, "down.weight")
                              ? residual
                              : 0.02f;
        for (float& x : want) x = std * rng.normal();
      }
      CHECK(std::memcmp(want.data(), p->value.data, want.size() * sizeof(float)) == 0);
      ++checked;
    }
    CHECK(checked >= 10);
  }
}

TEST_CASE("init/gpt2 and small_init: the stds they promise, by role") {
  // 16 x 24 = 384 draws a role: the sample rms is within ~10% of the std.
  const ablate::ModelDims d = ptest::dims();  // d_model 16, 2 layers
  Initialised g("{type: gpt2}");
  CHECK(g.rms(Role::kHidden) == doctest::Approx(0.02).epsilon(0.12));
  CHECK(g.rms(Role::kResidualOut) ==
        doctest::Approx(0.02 / std::sqrt(2.0 * d.n_layers)).epsilon(0.12));
  CHECK(g.values(Role::kGain) == std::vector<float>(24, 1.0f));
  CHECK(g.values(Role::kBias) == std::vector<float>(24, 0.0f));
  Initialised g2("{type: gpt2, std: 0.1, scale_residual: false}");
  CHECK(g2.rms(Role::kResidualOut) == doctest::Approx(0.1).epsilon(0.12));

  Initialised s("{type: small_init}");
  const double small = std::sqrt(2.0 / (5.0 * d.d_model));
  for (Role r : {Role::kEmbedding, Role::kPosition, Role::kHidden, Role::kHead})
    CHECK(s.rms(r) == doctest::Approx(small).epsilon(0.12));
  CHECK(s.rms(Role::kResidualOut) ==
        doctest::Approx(2.0 / (d.n_layers * std::sqrt(double(d.d_model)))).epsilon(0.12));
  CHECK(Initialised("{type: small_init, residual: small}").rms(Role::kResidualOut) ==
        doctest::Approx(small).epsilon(0.12));
  CHECK(s.values(Role::kGain) == std::vector<float>(24, 1.0f));
  CHECK_THROWS_AS(Initialised("{type: small_init, residual: huge}"), ablate::ConfigError);
}

TEST_CASE(
    "init: model.init chooses the variant, an unknown one is a config error naming the variants") {
  ptest::registry();
  auto first = [](const char* yaml) {
    YAML::Node n = YAML::Load(yaml);
    ablate::Model m(ablate::Options(n, std::make_shared<ablate::ConfigSource>(), "model"), 13, 1);
    return m.params().all()[0]->value.data[0];
  };
  const float gpt2 = first("{d_model: 16, n_heads: 2, n_layers: 2, context: 8}");
  CHECK(gpt2 == first("{d_model: 16, n_heads: 2, n_layers: 2, context: 8, init: gpt2}"));
  CHECK(gpt2 != first("{d_model: 16, n_heads: 2, n_layers: 2, context: 8, init: small_init}"));
  try {
    first("{d_model: 16, n_heads: 2, n_layers: 2, context: 8, init: xavier}");
    FAIL("an unknown init variant was accepted");
  } catch (const ablate::ConfigError& e) {
    CHECK(std::string(e.what()).find("gpt2") != std::string::npos);
  }
}

TEST_CASE("init/zero_out: residual outputs at 0, every other parameter gpt2's of the same seed") {
  const Initialised zero("{type: zero_out}"), gpt2("{type: gpt2}");
  for (Role r : kRoles) {
    INFO(ablate::role_name(r));
    if (r == Role::kResidualOut) CHECK(zero.values(r) == std::vector<float>(16 * 24, 0.0f));
    else CHECK(zero.values(r) == gpt2.values(r));
  }
  CHECK(gpt2.rms(Role::kResidualOut) > 0);
}
