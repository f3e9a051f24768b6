// The plugin registry against real shared libraries, including deliberately broken ones.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>

#include "ablate/conformance.hpp"
#include "ablate/family.hpp"

#include "ablate/norm.hpp"
#include "ablate/registry.hpp"
#include "test_util.hpp"

using ablate::test::registry;
namespace fs = std::filesystem;

static std::string bad(const std::string& name) {
  return std::string(ABLATE_TEST_PLUGIN_DIR) + "/" + name + "/" + name + ".so";
}

static std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ablate::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("registry/every family has variants loaded from real .so files") {
  auto& r = registry();
  REQUIRE(ablate::families().size() >= 8);
  for (const std::string& fam : ablate::family_names()) {
    auto v = r.variants(fam);
    CHECK_MESSAGE(!v.empty(), fam);
    for (auto* e : v) {
      CHECK(fs::exists(e->file));
      CHECK(fs::path(e->file).extension() == ".so");
      // File stem = family_name (plugins/<family>/<name>.cpp).
      CHECK(fs::path(e->file).stem().string() == fam + "_" + e->info->name);
    }
  }
}

TEST_CASE(
    "registry/family descriptors: every loaded family declared, defaults exist, checks present") {
  auto& r = registry();
  r.load_all();
  for (const std::string& fam : r.families())
    CHECK_MESSAGE(ablate::find_family(fam) != nullptr, fam);
  for (const ablate::FamilyDescriptor* d : ablate::families()) {
    INFO(d->name);
    CHECK(static_cast<bool>(d->checks));
    CHECK(!d->summary.empty());
    if (!d->default_variant.empty()) CHECK(r.find(d->name, d->default_variant) != nullptr);
    CHECK(d->list ==
          d->default_variant.empty());  // a list may be empty; a single choice has a default
  }
  // The options of a family left out of the config name its default, written in.
  ablate::Options model = ablate::conformance::options_from_yaml("{d_model: 8}", "model");
  const ablate::FamilyDescriptor& norm = ablate::family(ablate::Norm::kFamily);
  ablate::Options n = ablate::family_options(model, norm.name);
  CHECK(n.path() == "model.norm");
  CHECK(ablate::PluginRegistry::type_of(n) == norm.default_variant);
  CHECK(ablate::selection_override(norm, "my_norm") == "model.norm=my_norm");
  std::string msg = error_of([] { ablate::family("nrom"); });
  CHECK(msg.find("unknown plugin family 'nrom'") != std::string::npos);
  CHECK(msg.find("Did you mean 'norm'?") != std::string::npos);
}

TEST_CASE(
    "registry/a library in the plugin path that is not a plugin is skipped with a warning naming "
    "it") {
  ablate::test::TempDir dir;
  const std::string junk = dir.write("junk.so", "not a shared library");
  // A real shared library without an ablate section.
  fs::copy_file(fs::path(ABLATE_BINARY_DIR) / "framework" / "libablate_core.so",
                dir / "libnot_a_plugin.so");
  auto& r = registry();
  r.add_directory(dir.path.string());
  std::ostringstream err;
  std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
  r.load_all();
  r.add_directory(dir.path.string());  // searched again: warned once per file
  r.load_all();
  std::cerr.rdbuf(old);
  const std::string w = err.str();
  CHECK(ablate::test::count(w, junk) == 1);
  CHECK(w.find("not a readable shared library") != std::string::npos);
  CHECK(ablate::test::count(w, "libnot_a_plugin.so") == 1);
  CHECK(w.find("without an 'ablate' section") != std::string::npos);
  CHECK(r.find("ffn", "relu") != nullptr);  // the real plugins still load
}

TEST_CASE("registry/an API version mismatch names the file and both versions") {
  std::string msg = error_of([] { registry().load_file(bad("bad_version")); });
  CHECK(msg.find("bad_version.so") != std::string::npos);
  CHECK(msg.find("API version " + std::to_string(ablate::kPluginApiVersion + 998)) !=
        std::string::npos);
  CHECK(msg.find("expects " + std::to_string(ablate::kPluginApiVersion)) != std::string::npos);
}

TEST_CASE("registry/a missing library is an error naming the file") {
  std::string msg = error_of([] { registry().load_file("/nonexistent/dir/ffn_nothing.so"); });
  CHECK(msg.find("/nonexistent/dir/ffn_nothing.so") != std::string::npos);
  CHECK(msg.find("not found") != std::string::npos);
  msg = error_of([] { ablate::PluginRegistry::instance().add_directory("/nonexistent/plugins"); });
  CHECK(msg.find("/nonexistent/plugins") != std::string::npos);
}

TEST_CASE("registry/a library with an unresolved symbol fails at load, naming the file") {
  std::string msg = error_of([] { registry().load_file(bad("missing_symbol")); });
  CHECK(msg.find("missing_symbol.so") != std::string::npos);
  CHECK(msg.find("ablate_function_that_does_not_exist") != std::string::npos);
}

TEST_CASE("registry/a library without the plugin symbol is refused") {
  std::string msg = error_of([] { registry().load_file(bad("no_symbol")); });
  CHECK(msg.find("no_symbol.so") != std::string::npos);
  CHECK(msg.find("not an ablate plugin") != std::string::npos);
}

TEST_CASE("registry/a duplicate variant name is an error naming both files") {
  ablate::test::TempDir dir;
  auto* relu = registry().find("ffn", "relu");
  REQUIRE(relu);
  fs::copy_file(relu->file, dir / "another_relu.so");
  std::string msg = error_of([&] { registry().load_file(dir / "another_relu.so"); });
  CHECK(msg.find("another_relu.so") != std::string::npos);
  CHECK(msg.find("duplicate") != std::string::npos);
  CHECK(msg.find(relu->file) != std::string::npos);
}

TEST_CASE("registry/a plugin throwing in its constructor gives a located config error") {
  auto& r = registry();
  const ablate::PluginEntry& entry = r.load_file(bad("throws"));
  auto src = std::make_shared<ablate::ConfigSource>();
  src->file = "exp.yaml";
  ablate::Options o(YAML::Load("{type: throws}"), src, "model.norm");
  ablate::ParamStore store;
  ablate::BuildContext ctx{ablate::ModelDims{}, ablate::ParamScope(store, ""), 0};
  std::string msg;
  try {
    r.create<ablate::Norm>(o, ctx);
  } catch (const ablate::ConfigError& e) {
    msg = e.what();
  }
  CHECK(msg.find("exp.yaml:1:") != std::string::npos);
  CHECK(msg.find("deliberate failure") != std::string::npos);
  CHECK(msg.find("throws.so") != std::string::npos);
  r.unregister(entry);
  CHECK(r.find("norm", "throws") == nullptr);
}

TEST_CASE("registry/unknown variant names list the available ones with a did-you-mean") {
  auto src = std::make_shared<ablate::ConfigSource>();
  src->file = "experiments/base.yaml";
  ablate::Options o(YAML::Load("{type: layrnorm}"), src, "model.norm");
  ablate::ParamStore store;
  ablate::BuildContext ctx{ablate::ModelDims{}, ablate::ParamScope(store, ""), 0};
  std::string msg;
  try {
    registry().create<ablate::Norm>(o, ctx);
  } catch (const ablate::ConfigError& e) {
    msg = e.what();
  }
  CHECK(msg.find("experiments/base.yaml:1:8") != std::string::npos);
  CHECK(msg.find("model.norm.type") != std::string::npos);
  CHECK(msg.find("unknown norm 'layrnorm'") != std::string::npos);
  CHECK(msg.find("layernorm") != std::string::npos);
  CHECK(msg.find("Did you mean 'layernorm'?") != std::string::npos);
}
