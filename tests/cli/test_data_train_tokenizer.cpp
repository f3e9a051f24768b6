// `ablate data train-tokenizer` through the real binary: a tokenizer.json from files, a
// directory and compressed input, the same whatever the threads, which `ablate data tokenize`
// and a run use through gpt2's tokenizer_json; bad usage exits non-zero with a message.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>

#include "test_util.hpp"

namespace fs = std::filesystem;
using ablate::test::contains;

namespace {

ablate::test::CommandResult train(const std::string& args) {
  return ablate::test::run_command(ablate::test::ablate_binary() + " data train-tokenizer " + args);
}

std::string shakespeare() {
  return ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
}

}  // namespace

TEST_CASE(
    "data train-tokenizer: a tokenizer.json that gpt2 loads, the same for any threads and for "
    "compressed input") {
  ablate::test::TempDir dir;
  const std::string text = shakespeare();
  fs::create_directories(dir / "corpus");
  const std::string half = text.substr(0, text.size() / 2);
  const std::string a = dir.write("corpus/a.txt", half),
                    b = dir.write("corpus/b.txt", text.substr(half.size()));
  auto r = train("--vocab-size 600 --out " + dir / "one.json" + " --threads 1 " + a + " " + b);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "2 files"));
  CHECK(contains(r.output, "343 merges"));
  CHECK(contains(r.output, "vocabulary 600"));
  // A directory, two threads: the same file, byte for byte.
  r = train("-q --vocab-size 600 --out " + dir / "two.json" + " --threads 2 " + dir / "corpus");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(ablate::test::read_file(dir / "one.json") == ablate::test::read_file(dir / "two.json"));
  // gzip input (when gzip is there): the same again.
  if (ablate::test::run_command("cd " + dir / "corpus" +
                                " && gzip -k a.txt b.txt && mkdir ../gz && mv *.gz ../gz/")
          .status == 0) {
    r = train("-q --vocab-size 600 --out " + dir / "gz.json" + " " + dir / "gz");
    REQUIRE_MESSAGE(r.status == 0, r.output);
    CHECK(ablate::test::read_file(dir / "one.json") == ablate::test::read_file(dir / "gz.json"));
  }
  // ablate data tokenize with gpt2 and the trained file: the ids decode to the text.
  const std::string hello = dir.write("hello.txt", "First Citizen:\nSpeak, speak.");
  r = ablate::test::run_command(
      ablate::test::ablate_binary() +
      " data tokenize --tokenizer gpt2 --option tokenizer_json=" + dir / "one.json" + " " + hello);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  std::istringstream ids(r.output);
  int64_t n = 0;
  for (int64_t id; ids >> id; ++n) CHECK((id >= 0 && id < 600));
  CHECK(n > 0);
  CHECK(n < 20);
}

TEST_CASE("data train-tokenizer: bad usage and bad input exit non-zero with a message") {
  ablate::test::TempDir dir;
  const std::string text = dir.write("t.txt", shakespeare());
  auto r = train("--out " + dir / "x.json" + " " + text);
  CHECK(r.status != 0);
  CHECK(contains(r.output, "--vocab-size"));
  r = train("--vocab-size 100 --out " + dir / "x.json" + " " + text);
  CHECK(r.status != 0);
  CHECK(contains(r.output, "257"));
  r = train("--vocab-size 300 " + text);
  CHECK(r.status != 0);
  CHECK(contains(r.output, "--out"));
  r = train("--vocab-size 300 --out " + dir / "x.json" + " " + dir / "missing.txt");
  CHECK(r.status != 0);
  CHECK(contains(r.output, "missing.txt"));
  const std::string exists = dir.write("exists.json", "{}");
  r = train("--vocab-size 300 --out " + exists + " " + text);
  CHECK(r.status != 0);
  CHECK(contains(r.output, "--overwrite"));
  CHECK(ablate::test::read_file(exists) == "{}");
  r = train("-q --overwrite --vocab-size 300 --out " + exists + " " + text);
  CHECK(r.status == 0);
  CHECK(contains(ablate::test::read_file(exists), "\"merges\""));
}
