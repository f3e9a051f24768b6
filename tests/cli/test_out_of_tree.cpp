// A plugin written outside the tree, for real: install ablate to a temporary prefix, write
// a skeleton with `ablate plugin new`, build it with CMake against the prefix
// (find_package(ablate) + ablate_add_plugin), check it with `ablate plugin check`, and
// train a few steps with it from YAML via --plugin-dir and ABLATE_PLUGIN_PATH.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>

#include "test_util.hpp"

using ablate::test::run_command;
using ablate::test::TempDir;

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

}  // namespace

TEST_CASE("outoftree/install, plugin new, build against the package, plugin check, train with it") {
  const auto t0 = std::chrono::steady_clock::now();
  TempDir tmp;
  const std::string prefix = tmp / "prefix", project = tmp / "my_ffn", build = project + "/build";

  auto install = run_command("cmake --install " + q(ABLATE_BINARY_DIR) + " --prefix " + q(prefix));
  INFO(install.output);
  REQUIRE(install.status == 0);
  const std::string ablate = prefix + "/bin/ablate";
  for (const char* f :
       {"/bin/ablate", "/lib/libablate_core.so", "/lib/cmake/ablate/ablateConfig.cmake",
        "/lib/cmake/ablate/ablateConfigVersion.cmake", "/lib/cmake/ablate/ablateTargets.cmake",
        "/include/ablate/plugin.hpp", "/include/ablate/conformance.hpp",
        "/lib/ablate/plugins/ffn_relu.so"})
    CHECK_MESSAGE(std::filesystem::exists(prefix + f), (prefix + f));
  // The installed binary runs from the prefix (RPATH) and lists the installed plugins.
  auto listed = run_command(q(ablate) + " plugins ffn");
  CHECK(listed.status == 0);
  CHECK(listed.output.find("relu") != std::string::npos);

  auto made = run_command(q(ablate) + " plugin new ffn my_ffn --dir " + q(project));
  INFO(made.output);
  REQUIRE(made.status == 0);
  CHECK(std::filesystem::exists(project + "/my_ffn.cpp"));
  CHECK(std::filesystem::exists(project + "/CMakeLists.txt"));
  CHECK(made.output.find("-DCMAKE_PREFIX_PATH=" +
                         std::filesystem::weakly_canonical(prefix).string()) != std::string::npos);
  CHECK(run_command(q(ablate) + " plugin new ffn my_ffn --dir " + q(project)).status !=
        0);  // no silent overwrite

  auto built = run_command("cmake -S " + q(project) + " -B " + q(build) +
                           " -DCMAKE_PREFIX_PATH=" + q(prefix) + " && cmake --build " + q(build));
  INFO(built.output);
  REQUIRE(built.status == 0);
  REQUIRE(std::filesystem::exists(build + "/my_ffn.so"));

  auto checked = run_command(q(ablate) + " plugin check " + q(build + "/my_ffn.so"));
  INFO(checked.output);
  CHECK(checked.status == 0);
  CHECK(checked.output.find("FAIL") == std::string::npos);
  CHECK(checked.output.find("gradients by finite differences") != std::string::npos);
  CHECK(checked.output.find("OK: ffn 'my_ffn'") != std::string::npos);

  const std::string exp =
      tmp.write("exp.yaml",
                std::string("name: outoftree\nseed: 1\ndata: {path: ") + ABLATE_TEST_DATA_DIR +
                    "/shakespeare_16k.txt}\n"
                    "model: {d_model: 32, n_heads: 2, n_layers: 1, context: 32, ffn: {type: "
                    "my_ffn, hidden: 48}}\n"
                    "train: {steps: 5, batch_size: 4, eval_every: 5, eval_batches: 2, threads: 1}\n"
                    "optimizer: {type: adamw, lr: 0.003}\nsample: {tokens: 0}\n");
  auto ran = run_command(q(ablate) + " run " + q(exp) + " --plugin-dir " + q(build) + " -o " +
                         q(tmp / "run") + " -q");
  INFO(ran.output);
  CHECK(ran.status == 0);
  CHECK(ran.output.find("5 steps") != std::string::npos);
  CHECK(std::filesystem::exists(tmp / "run/run.h5"));
  // The saved config names the variant; without its directory the name is unknown and the
  // error says where to look.
  CHECK(ablate::test::read_file(tmp / "run/config.yaml").find("my_ffn") != std::string::npos);
  auto missing = run_command(q(ablate) + " run " + q(exp) + " -o " + q(tmp / "run2") + " -q");
  CHECK(missing.status != 0);
  CHECK(missing.output.find("unknown ffn 'my_ffn'") != std::string::npos);
  CHECK(missing.output.find("--plugin-dir") != std::string::npos);
  auto env = run_command("ABLATE_PLUGIN_PATH=" + q(build) + " " + q(ablate) + " run " + q(exp) +
                         " train.steps=2 -o " + q(tmp / "run3") + " -q");
  INFO(env.output);
  CHECK(env.status == 0);

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("out-of-tree plugin: install, new, build, check and train in " << seconds << " s");
}
