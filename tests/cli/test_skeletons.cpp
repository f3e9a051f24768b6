// Every family's `ablate plugin new` skeleton is a real plugin:
// tools/plugin_skeletons/<family>.cpp, embedded in the binary, written by the command, built with
// CMake against this build tree (find_package(ablate) through -Dablate_DIR, as the command's
// "next:" lines say), and passed by `ablate plugin check`.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ablate/family.hpp"
#include "test_util.hpp"

using ablate::test::read_file;
using ablate::test::run_command;
using ablate::test::TempDir;

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

const std::filesystem::path kSkeletonDir =
    std::filesystem::path(ABLATE_SOURCE_DIR) / "tools" / "plugin_skeletons";

}  // namespace

TEST_CASE("skeletons/every skeleton file is a family's, and plugin new renames its variant") {
  for (const auto& f : std::filesystem::directory_iterator(kSkeletonDir)) {
    CAPTURE(f.path());
    CHECK(f.path().extension() == ".cpp");
    CHECK(ablate::find_family(f.path().stem().string()) != nullptr);
  }
  TempDir tmp;
  auto r = run_command(ablate::test::ablate_binary() + " plugin new qk_transform col_gain --dir " +
                       q(tmp / "p"));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("(qk_transform 'col_gain': learned gains on the columns of q (and k))") !=
        std::string::npos);
  const std::string src = read_file(tmp / "p/col_gain.cpp");
  CHECK(src.find("ABLATE_PLUGIN(ablate::QkTransform, col_gain, ColGain,") != std::string::npos);
  CHECK(src.find("my_qk_transform") == std::string::npos);
  CHECK(src.find("MyQkTransform") == std::string::npos);
  CHECK(read_file(tmp / "p/CMakeLists.txt").find("ablate_add_plugin(col_gain col_gain.cpp)") !=
        std::string::npos);
}

TEST_CASE(
    "skeletons/every family's plugin new skeleton builds against the build tree and passes plugin "
    "check") {
  TempDir tmp;
  const std::string ablate = q(ablate::test::ablate_binary());
  std::vector<std::pair<std::string, std::string>> made;  // family, variant name
  std::string top = "cmake_minimum_required(VERSION 3.20)\nproject(skeletons LANGUAGES CXX)\n";
  for (const ablate::FamilyDescriptor* d : ablate::families()) {
    // Named as in the skeleton file, so the source written is the file as it is.
    const std::string name = "my_" + d->name;
    CAPTURE(d->name);
    auto r =
        run_command(ablate + " plugin new " + d->name + " " + name + " --dir " + q(tmp / name));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(read_file(tmp / (name + "/" + name + ".cpp")) ==
          read_file((kSkeletonDir / (d->name + ".cpp")).string()));
    // The printed build command finds this build tree's package.
    CHECK(r.output.find("-Dablate_DIR=" + std::filesystem::canonical(ABLATE_BINARY_DIR).string()) !=
          std::string::npos);
    made.emplace_back(d->name, name);
    top += "add_subdirectory(" + name + ")\n";
  }
  CHECK(made.size() >= 14);
  tmp.write("CMakeLists.txt", top);
  // Unoptimised (build type O0: -O0, no -g) rather than the projects' default Release: the
  // same code, compiled in 60% of the CPU time; the checks take a second either way.
  auto built = run_command("cmake -S " + q(tmp.path.string()) + " -B " + q(tmp / "build") +
                           " -Dablate_DIR=" + q(ABLATE_BINARY_DIR) +
                           " -DCMAKE_BUILD_TYPE=O0 -DCMAKE_CXX_FLAGS_O0=-O0 > /dev/null && " +
                           "cmake --build " + q(tmp / "build") + " -j2");
  INFO(built.output);
  REQUIRE(built.status == 0);
  for (const auto& entry : made) {
    const std::string &family = entry.first, &name = entry.second;
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
