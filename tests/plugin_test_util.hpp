// Helpers shared by the plugin conformance tests (tests/test_<family>.cpp): options from YAML
// text, the registry with the build's plugins, every variant of a family, a plugin built in
// its own ParamStore, and a finite-difference gradient check of a whole plugin's forward.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ablate/graph.hpp"
#include "ablate/ops.hpp"
#include "ablate/options.hpp"
#include "ablate/plugin.hpp"
#include "ablate/registry.hpp"

namespace ptest {

// Options for `yaml` at key path `path` of an in-memory document.
inline ablate::Options opts(const std::string& yaml, const std::string& path = "model.plugin") {
  return ablate::Options(YAML::Load(yaml), std::make_shared<ablate::ConfigSource>(), path);
}

inline ablate::PluginRegistry& registry() {
  static const bool loaded = [] {
    auto& r = ablate::PluginRegistry::instance();
    r.add_directory(ABLATE_PLUGIN_DIR);
    r.load_all();
    return true;
  }();
  (void)loaded;
  return ablate::PluginRegistry::instance();
}

// Every variant of `family`, without the deliberately broken fixtures that the registry
// tests may have loaded. Fails the test when there are none.
inline std::vector<std::string> variants(const std::string& family) {
  std::vector<std::string> names;
#ifdef ABLATE_TEST_PLUGIN_DIR
  const std::string fixtures = ABLATE_TEST_PLUGIN_DIR;
#else
  const std::string fixtures = "\x01";
#endif
  for (const ablate::PluginEntry* e : registry().variants(family))
    if (e->file.find(fixtures) == std::string::npos) names.push_back(e->info->name);
  REQUIRE_MESSAGE(!names.empty(), "no variants of family '" << family << "' found in " << ABLATE_PLUGIN_DIR);
  return names;
}

inline ablate::ModelDims dims(int64_t C = 16, int64_t NH = 2, int64_t context = 16, bool bias = true) {
  ablate::ModelDims d;
  d.vocab_size = 11;
  d.d_model = C;
  d.n_heads = NH;
  d.n_layers = 2;
  d.context = context;
  d.bias = bias;
  d.layer = 0;
  return d;
}

// A plugin with the ParamStore that holds its parameters; the plugin is destroyed first.
template <class Base>
struct Built {
  std::unique_ptr<ablate::ParamStore> store;
  std::unique_ptr<Base> obj;
  Base* operator->() const { return obj.get(); }
};

template <class Base>
Built<Base> build(const std::string& yaml, const ablate::ModelDims& d = dims(), uint64_t seed = 7,
                  const std::string& path = "model.plugin") {
  Built<Base> b;
  b.store = std::make_unique<ablate::ParamStore>(seed);
  b.obj = registry().create<Base>(opts(yaml, path), ablate::BuildContext{d, ablate::ParamScope(*b.store, "p."), seed});
  return b;
}

inline std::string type_yaml(const std::string& name) { return "{type: " + name + "}"; }

inline std::vector<float> randn(size_t n, uint64_t seed, float std = 1.0f) {
  ablate::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = std * r.normal();
  return v;
}

inline std::vector<float> values(ablate::Graph& g, ablate::Var v) {
  const ablate::Tensor& t = g.value(v);
  return std::vector<float>(t.data, t.data + t.numel());
}

// Replaces every parameter by N(0, std): gradients are then checked away from the special
// values of the init (unit gains, zero biases, tiny weights).
inline void randomize(ablate::ParamStore& s, uint64_t seed, float std = 0.5f) {
  ablate::Rng r(seed);
  for (ablate::Parameter* p : s.all())
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data[i] = std * r.normal();
}

// The options a variant reads, found by constructing it in describe mode.
template <class Base>
std::vector<ablate::OptionDoc> describe(const std::string& family, const std::string& name, const ablate::ModelDims& d) {
  const ablate::PluginEntry* e = registry().find(family, name);
  REQUIRE(e != nullptr);
  ablate::Options o = ablate::Options::describe("model.plugin");
  ablate::ParamStore store(1);
  std::unique_ptr<Base> obj(static_cast<Base*>(e->info->create(o, ablate::BuildContext{d, ablate::ParamScope(store, "p."), 1})));
  return o.docs();
}

// Conformance for options: an unknown key is a ConfigError naming it, and every numeric
// option rejects an absurd value (at least one of a huge negative and a huge positive one).
template <class Base>
void check_option_validation(const std::string& family, const std::string& name, const ablate::ModelDims& d = dims()) {
  INFO(family << " '" << name << "'");
  try {
    build<Base>("{type: " + name + ", no_such_option: 1}", d);
    FAIL("an unknown option was accepted");
  } catch (const ablate::ConfigError& e) {
    CHECK_MESSAGE(std::string(e.what()).find("no_such_option") != std::string::npos, e.what());
  }
  for (const ablate::OptionDoc& doc : describe<Base>(family, name, d)) {
    std::vector<std::string> absurd;
    if (doc.type == std::string("a number")) absurd = {"-1e30", "1e30"};
    else if (doc.type == std::string("an integer")) absurd = {"-4611686018427387904", "4611686018427387904"};
    else if (doc.type == std::string("a list of numbers")) absurd = {"[-1e30, -1e30]", "[1e30, 1e30]"};
    else if (doc.type == std::string("a list of integers")) absurd = {"[-4611686018427387904]", "[4611686018427387904]"};
    else continue;
    INFO("option '" << doc.key << "'");
    int rejected = 0;
    for (const std::string& v : absurd) {
      try {
        build<Base>("{type: " + name + ", " + doc.key + ": " + v + "}", d);
      } catch (const ablate::ConfigError& e) {
        CHECK_MESSAGE(std::string(e.what()).find("model.plugin." + doc.key) != std::string::npos, e.what());
        ++rejected;
      }
    }
    CHECK_MESSAGE(rejected > 0, "numeric option '" << doc.key << "' accepts both " << absurd[0] << " and " << absurd[1]
                                                   << "; give it a range (Options::get_in)");
  }
}

// ---- finite-difference gradient check ---------------------------------------------------

using Outputs = std::vector<ablate::Var>;
using ForwardFn = std::function<Outputs(ablate::Graph&)>;

struct GradCheckResult {
  int checked = 0, skipped = 0, failed = 0;
  std::string report;  // the failures
};

// Checks d(loss)/d(p) for every p in `wrt` (parameters of the plugin and inputs made
// Parameters so that they receive gradients), with loss = sum_k sum(out_k * R_k) for fixed
// random R_k. At most `per_tensor` elements of each tensor are checked by central
// differences (the loss is accumulated in double). Elements where the two one-sided
// differences disagree sit on a kink (relu, max) and are skipped.
inline GradCheckResult check_gradients(const ForwardFn& forward, const std::vector<ablate::Parameter*>& wrt,
                                       int per_tensor = 8, double h = 1e-3, double rtol = 3e-2, double atol = 2e-3) {
  GradCheckResult res;
  ablate::Graph g;
  std::vector<std::vector<float>> R;
  Outputs ys = forward(g);
  ablate::Var loss;
  for (size_t k = 0; k < ys.size(); ++k) {
    const ablate::Tensor& t = g.value(ys[k]);
    R.push_back(randn(static_cast<size_t>(t.numel()), 1000 + k));
    ablate::Var r = g.constant(R.back().data(), t.rows, t.cols);
    ablate::Var s = ablate::sum(g, ablate::mul(g, ys[k], r));
    loss = loss.valid() ? ablate::add(g, loss, s) : s;
  }
  for (ablate::Parameter* p : wrt) std::memset(p->grad.data, 0, sizeof(float) * static_cast<size_t>(p->grad.numel()));
  g.backward(loss);
  std::vector<std::vector<float>> analytic;
  for (ablate::Parameter* p : wrt) analytic.emplace_back(p->grad.data, p->grad.data + p->grad.numel());

  auto eval = [&]() {
    g.reset();
    ablate::NoGrad ng(g);
    Outputs out = forward(g);
    double L = 0;
    for (size_t k = 0; k < out.size(); ++k) {
      const ablate::Tensor& t = g.value(out[k]);
      for (int64_t i = 0; i < t.numel(); ++i) L += static_cast<double>(R[k][static_cast<size_t>(i)]) * t.data[i];
    }
    return L;
  };
  const double L0 = eval();
  ablate::Rng pick(99);
  for (size_t pi = 0; pi < wrt.size(); ++pi) {
    ablate::Parameter& p = *wrt[pi];
    const int64_t n = p.value.numel();
    double scale = 0;
    for (float a : analytic[pi]) scale = std::max(scale, static_cast<double>(std::fabs(a)));
    scale = std::max(scale, 1.0);
    // Distinct elements: the first per_tensor of a seeded shuffle.
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
    const int64_t m = std::min<int64_t>(n, per_tensor);
    for (int64_t i = 0; i < m; ++i)
      std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(i + static_cast<int64_t>(pick.below(static_cast<uint64_t>(n - i))))]);
    idx.resize(static_cast<size_t>(m));
    for (int64_t i : idx) {
      float& v = p.value.data[i];
      const float saved = v;
      v = static_cast<float>(saved + h);
      const double hp = static_cast<double>(v) - saved;
      const double Lp = eval();
      v = static_cast<float>(saved - h);
      const double hm = saved - static_cast<double>(v);
      const double Lm = eval();
      v = saved;
      const double fwd = (Lp - L0) / hp, bwd = (L0 - Lm) / hm, central = (Lp - Lm) / (hp + hm);
      const double a = analytic[pi][static_cast<size_t>(i)];
      const double tol = atol * scale + rtol * std::max(std::fabs(a), std::fabs(central));
      if (std::fabs(fwd - bwd) > tol + 0.05 * std::max(std::fabs(fwd), std::fabs(bwd))) {
        ++res.skipped;
        continue;
      }
      ++res.checked;
      if (std::fabs(a - central) > tol) {
        ++res.failed;
        res.report += p.name + "[" + std::to_string(i) + "]: analytic " + std::to_string(a) + ", numeric " +
                      std::to_string(central) + "\n";
      }
    }
  }
  return res;
}

// Runs check_gradients and turns its result into doctest checks.
inline void require_gradients(const ForwardFn& forward, const std::vector<ablate::Parameter*>& wrt) {
  GradCheckResult r = check_gradients(forward, wrt);
  INFO("gradient mismatches:\n" << r.report);
  CHECK(r.failed == 0);
  CHECK(r.checked > 0);
  CHECK_MESSAGE(r.skipped <= r.checked, "too many elements on kinks: " << r.skipped << " skipped, " << r.checked << " checked");
}

}  // namespace ptest
