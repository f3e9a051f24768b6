// Shared helpers for the test suite: temporary directories, running the real `ablate`
// binary, loading the real plugin directory.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "ablate/registry.hpp"

namespace ablate::test {

// A fresh directory removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("ablate_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

struct CommandResult {
  int status = -1;     // exit code
  std::string output;  // stdout and stderr together
};

// Runs a shell command, capturing its output and exit code.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string ablate_binary() { return std::string(ABLATE_BINARY_DIR) + "/ablate"; }

// The registry with the build's plugin directory loaded.
inline PluginRegistry& registry() {
  auto& r = PluginRegistry::instance();
  r.add_directory(ABLATE_PLUGIN_DIR);
  r.load_all();
  return r;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace ablate::test
