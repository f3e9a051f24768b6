// Every family's `ablate plugin new` skeleton is a real plugin: written by the command, built
// with CMake against this build tree (find_package(ablate) through -Dablate_DIR, as the
// command's "next:" lines say), and passed by `ablate plugin check`.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ablate/family.hpp"
#include "test_util.hpp"

using ablate::test::run_command;
using ablate::test::TempDir;

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

}  // namespace

TEST_CASE(
    "skeletons/every family's plugin new skeleton builds against the build tree and passes plugin "
    "check") {
  TempDir tmp;
  const std::string ablate = q(ablate::test::ablate_binary());
  std::vector<std::pair<std::string, std::string>> made;  // family, variant name
  std::string top = "cmake_minimum_required(VERSION 3.20)\nproject(skeletons LANGUAGES CXX)\n";
  for (const ablate::FamilyDescriptor* d : ablate::families()) {
    if (d->template_source.empty()) continue;
    const std::string name = "my_" + d->name;
    auto r =
        run_command(ablate + " plugin new " + d->name + " " + name + " --dir " + q(tmp / name));
    INFO(r.output);
    REQUIRE(r.status == 0);
    // The printed build command finds this build tree's package.
    CHECK(r.output.find("-Dablate_DIR=" + std::filesystem::canonical(ABLATE_BINARY_DIR).string()) !=
          std::string::npos);
    made.emplace_back(d->name, name);
    top += "add_subdirectory(" + name + ")\n";
  }
  CHECK(made.size() >= 13);
  tmp.write("CMakeLists.txt", top);
  auto built = run_command("cmake -S " + q(tmp.path.string()) + " -B " + q(tmp / "build") +
                           " -Dablate_DIR=" + q(ABLATE_BINARY_DIR) +
                           " > /dev/null && cmake --build " + q(tmp / "build") + " -j2");
  INFO(built.output);
  REQUIRE(built.status == 0);
  for (const auto& [family, name] : made) {
    const std::string so = tmp / ("build/" + name + "/" + name + ".so");
    CAPTURE(family);
    REQUIRE(std::filesystem::exists(so));
    auto checked = run_command(ablate + " plugin check " + q(so));
    INFO(checked.output);
    CHECK(checked.status == 0);
    CHECK(checked.output.find("FAIL") == std::string::npos);
    CHECK(checked.output.find("OK: " + family + " '" + name + "'") != std::string::npos);
  }
}
