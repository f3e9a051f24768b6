// The plugin registry against real shared libraries, including deliberately broken ones.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>

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
  for (const char* fam : {"tokenizer", "positional", "attention", "ffn", "norm", "optimizer", "scheduler"}) {
    auto v = r.variants(fam);
    CHECK_MESSAGE(!v.empty(), fam);
    for (auto* e : v) {
      CHECK(fs::exists(e->file));
      CHECK(fs::path(e->file).extension() == ".so");
      // File stem = family_name (plugins/<family>/<name>.cpp).
      CHECK(fs::path(e->file).stem().string() == std::string(fam) + "_" + e->info->name);
    }
  }
}

TEST_CASE("registry/an API version mismatch names the file and both versions") {
  std::string msg = error_of([] { registry().load_file(bad("bad_version")); });
  CHECK(msg.find("bad_version.so") != std::string::npos);
  CHECK(msg.find("API version " + std::to_string(ablate::kPluginApiVersion + 998)) != std::string::npos);
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
