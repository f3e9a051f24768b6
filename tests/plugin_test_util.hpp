// Helpers shared by the plugin tests (tests/model/test_<family>.cpp): options from YAML text, the
// registry with the build's plugins, every variant of a family, a plugin built in its own
// ParamStore, and the family conformance checks of the core library as doctest checks.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ablate/conformance.hpp"
#include "ablate/graph.hpp"
#include "ablate/init.hpp"
#include "ablate/ops.hpp"
#include "ablate/options.hpp"
#include "ablate/plugin.hpp"
#include "ablate/registry.hpp"

namespace ptest {

// Options for `yaml` at key path `path` of an in-memory document.
inline ablate::Options opts(const std::string& yaml, const std::string& path = "model.plugin") {
  return ablate::conformance::options_from_yaml(yaml, path);
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
  REQUIRE_MESSAGE(!names.empty(),
                  "no variants of family '" << family << "' found in " << ABLATE_PLUGIN_DIR);
  return names;
}

inline ablate::ModelDims dims(int64_t C = 16, int64_t NH = 2, int64_t context = 16,
                              bool bias = true) {
  return ablate::conformance::small_dims(C, NH, context, bias);
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
  const std::vector<std::string> vocab = ablate::conformance::small_vocab(d.vocab_size);
  b.obj = registry().create<Base>(
      opts(yaml, path),
      ablate::BuildContext{d, ablate::ParamScope(*b.store, "p."), seed, nullptr, &vocab});
  ablate::initialise_default(*b.store, d);  // the values a model's default init gives
  return b;
}

inline std::string type_yaml(const std::string& name) { return "{type: " + name + "}"; }

inline std::vector<float> randn(size_t n, uint64_t seed, float std = 1.0f) {
  return ablate::conformance::randn(n, seed, std);
}

inline std::vector<float> values(ablate::Graph& g, ablate::Var v) {
  const ablate::Tensor& t = g.value(v);
  return std::vector<float>(t.data, t.data + t.numel());
}

// Replaces every parameter by N(0, std) (see conformance::randomize).
inline void randomize(ablate::ParamStore& s, uint64_t seed, float std = 0.5f) {
  ablate::conformance::randomize(s, seed, std);
}

using Outputs = ablate::conformance::Outputs;

// A finite-difference gradient check (conformance::check_gradients) as doctest checks.
inline void require_gradients(const ablate::conformance::ForwardFn& forward,
                              const std::vector<ablate::Parameter*>& wrt) {
  const ablate::conformance::GradCheckResult r = ablate::conformance::check_gradients(forward, wrt);
  INFO("gradient mismatches:\n" << r.report);
  CHECK(r.failed == 0);
  CHECK(r.checked > 0);
  CHECK_MESSAGE(r.skipped <= r.checked, "too many elements on kinks: " << r.skipped << " skipped, "
                                                                       << r.checked << " checked");
}

// The family's conformance checks (framework/model/src/conformance/<family>.cpp, the same
// that `ablate plugin check` runs) on every variant of the family, one doctest check per check.
inline void check_conformance(const std::string& family,
                              const ablate::conformance::Settings& settings = {}) {
  for (const std::string& name : variants(family)) {
    const ablate::conformance::Report r =
        ablate::conformance::check_variant(family, name, settings);
    CHECK_MESSAGE(!r.checks.empty(), family << " '" << name << "': no checks ran");
    for (const ablate::conformance::CheckResult& c : r.checks) {
      INFO(family << " '" << name << "': " << c.name);
      CHECK_MESSAGE(c.passed, c.detail);
    }
  }
}

#ifdef ABLATE_TEST_PLUGIN_DIR
// The family's conformance checks on a deliberately broken fixture (tests/plugins/<name>.cpp,
// loaded for the call and unloaded after): the report, for tests that a check fails on it.
inline ablate::conformance::Report check_fixture(const std::string& family,
                                                 const std::string& name) {
  auto& reg = registry();
  const ablate::PluginEntry& e =
      reg.load_file(std::string(ABLATE_TEST_PLUGIN_DIR) + "/" + name + "/" + name + ".so");
  ablate::conformance::Report r = ablate::conformance::check_variant(family, name);
  reg.unregister(e);
  return r;
}

// The detail of the check whose name contains `check` in a fixture's report, which must fail
// (a failed doctest check when it passed or did not run).
inline std::string failure_of(const ablate::conformance::Report& r, const std::string& check) {
  for (const ablate::conformance::CheckResult& c : r.checks)
    if (c.name.find(check) != std::string::npos) {
      CHECK_MESSAGE(!c.passed, "'" << c.name << "' passed on " << r.variant);
      return c.detail;
    }
  FAIL_CHECK("no check named '" << check << "' ran on " << r.variant);
  return "";
}
#endif

}  // namespace ptest
