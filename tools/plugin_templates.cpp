// The CMake project `ablate plugin new` writes next to the family's skeleton (the
// skeletons themselves are tools/plugin_skeletons/<family>.cpp).
#include "plugin_templates.hpp"

namespace ablate::cli {

namespace {

const char* kCMake =
    R"TPL(# The ablate plugin @NAME@, built against an installed ablate or an ablate build tree:
#   cmake -S . -B build -DCMAKE_PREFIX_PATH=<where ablate is installed>
#   cmake -S . -B build -Dablate_DIR=<ablate's build directory>
#   cmake --build build
#   ablate plugin check build/@NAME@.so
#   ablate run experiment.yaml --plugin-dir build
cmake_minimum_required(VERSION 3.20)
project(@NAME@ LANGUAGES CXX)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
find_package(ablate REQUIRED)
# A MODULE library @NAME@.so linked to ablate::train (and ablate::model), compiled as ablate was (C++17, -march).
ablate_add_plugin(@NAME@ @NAME@.cpp)
)TPL";

}  // namespace

std::string plugin_cmakelists() { return kCMake; }

}  // namespace ablate::cli
