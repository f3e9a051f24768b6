// Data files: SHA-256 vectors, the search order of resolve_data_file, the offline
// download message, and read_text_file's checks (missing, empty, not UTF-8).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

using ablate::test::contains;
using ablate::test::error_of;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "ablate-data-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = fs::canonical(t);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name, const std::string& content) const {
    fs::path p = path / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
};

// Sets (or unsets) an environment variable for the lifetime of the guard.
struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  EnvGuard(std::string n, const std::optional<std::string>& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ~EnvGuard() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

struct CwdGuard {
  fs::path old = fs::current_path();
  explicit CwdGuard(const fs::path& p) { fs::current_path(p); }
  ~CwdGuard() { fs::current_path(old); }
};

const std::string kTestData = ABLATE_TEST_DATA_DIR;
const std::string kShakespeareSha =
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed";

}  // namespace

TEST_CASE("io/data: sha256 known vectors") {
  CHECK(ablate::sha256_hex("") ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(ablate::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(ablate::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(ablate::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Padding edge cases: 55, 56 and 64 bytes (one or two final blocks).
  CHECK(ablate::sha256_hex(std::string(55, 'a')) ==
        "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  CHECK(ablate::sha256_hex(std::string(56, 'a')) ==
        "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  CHECK(ablate::sha256_hex(std::string(64, 'a')) ==
        "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST_CASE("io/data: sha256 of the shared tiny Shakespeare") {
  const std::string shared = std::string(ABLATE_SOURCE_DIR) + "/../shared/data/tinyshakespeare.txt";
  if (!fs::exists(shared)) {
    MESSAGE("skipped: " << shared << " not present");
    return;
  }
  std::string text = ablate::read_text_file(shared);
  CHECK(text.size() == 1115394);
  CHECK(ablate::sha256_hex(text) == kShakespeareSha);
}

TEST_CASE("io/data: resolve_data_file search order") {
  const std::string expected = fs::canonical(kTestData + "/shakespeare_16k.txt").string();
  // By name, next to the experiment file; and a relative path from the experiment's directory.
  CHECK(ablate::resolve_data_file("shakespeare_16k.txt", kTestData) == expected);
  CHECK(ablate::resolve_data_file("data/shakespeare_16k.txt",
                                  std::string(ABLATE_SOURCE_DIR) + "/tests") == expected);
  CHECK(ablate::resolve_data_file("../data/shakespeare_16k.txt", kTestData) == expected);
  // Absolute.
  CHECK(ablate::resolve_data_file(expected, "/nonexistent") == expected);
  {  // Relative to the current directory.
    CwdGuard cwd(kTestData);
    CHECK(ablate::resolve_data_file("shakespeare_16k.txt", "") == expected);
  }

  TempDir a, b;
  const std::string in_b = b.file("corpus.txt", "hello\n");
  {  // ABLATE_DATA_PATH, ':'-separated; empty entries and missing dirs are skipped.
    EnvGuard env("ABLATE_DATA_PATH", a.path.string() + "::/nonexistent:" + b.path.string());
    CHECK(ablate::resolve_data_file("corpus.txt", "/nonexistent") == in_b);
    // yaml_dir comes first.
    const std::string in_a = a.file("corpus.txt", "first\n");
    CHECK(ablate::resolve_data_file("corpus.txt", a.path.string()) == in_a);
    fs::remove(in_a);
  }
  {  // The cache directory comes last.
    ablate::DataSearchOptions opt;
    opt.cache_dir = b.path.string();
    CHECK(ablate::resolve_data_file("corpus.txt", a.path.string(), opt) == in_b);
    auto places = ablate::data_search_paths("corpus.txt", a.path.string(), opt);
    REQUIRE(places.size() >= 3);
    CHECK(places.front() == (a.path / "corpus.txt").string());
    CHECK(places.back() == in_b);
  }
  // The source tree's data directories.
  if (fs::exists(std::string(ABLATE_SOURCE_DIR) + "/../shared/data/tinyshakespeare.txt"))
    CHECK(contains(ablate::resolve_data_file("tinyshakespeare.txt", a.path.string()),
                   "shared/data/tinyshakespeare.txt"));
  // A directory of that name is not a data file.
  fs::create_directories(a.path / "dir.txt");
  ablate::DataSearchOptions opt;
  opt.cache_dir = b.path.string();
  const std::string dir_msg =
      error_of([&] { ablate::resolve_data_file("dir.txt", a.path.string(), opt); });
  CHECK(contains(dir_msg, "not found"));
  CHECK(contains(dir_msg, "dir.txt  (a directory: name the text file inside it)"));
}

TEST_CASE("io/data: a missing unknown file lists every place searched") {
  TempDir a, cache;
  EnvGuard env("ABLATE_DATA_PATH", "/data/one:/data/two");
  ablate::DataSearchOptions opt;
  opt.cache_dir = (cache.path / "ablate-cache").string();
  std::string msg =
      error_of([&] { ablate::resolve_data_file("missing-corpus.txt", a.path.string(), opt); });
  INFO(msg);
  CHECK(contains(msg, "data file 'missing-corpus.txt' not found. Searched:"));
  for (const auto& p : ablate::data_search_paths("missing-corpus.txt", a.path.string(), opt))
    CHECK(contains(msg, "  " + p + "\n"));
  CHECK(contains(msg, (a.path / "missing-corpus.txt").string()));
  CHECK(contains(msg, (fs::current_path() / "missing-corpus.txt").string()));
  CHECK(contains(msg, "/data/one/missing-corpus.txt"));
  CHECK(contains(msg, "/data/two/missing-corpus.txt"));
  CHECK(contains(msg, std::string(ABLATE_SOURCE_DIR) + "/data/missing-corpus.txt"));
  CHECK(contains(msg, opt.cache_dir + "/missing-corpus.txt"));
  CHECK(contains(msg, "ABLATE_DATA_PATH"));
  CHECK_FALSE(contains(msg, "Downloading"));
  CHECK(contains(error_of([&] { ablate::resolve_data_file("/abs/missing.txt", a.path.string()); }),
                 "Searched:\n  /abs/missing.txt\n"));
  CHECK(contains(error_of([&] { ablate::resolve_data_file("", a.path.string()); }),
                 "empty file name"));
}

TEST_CASE("io/data: a known dataset is downloaded, or the offline message says what to do") {
  TempDir a, cache;
  EnvGuard env("ABLATE_DATA_PATH", std::nullopt);
  ablate::DataSearchOptions opt;
  opt.cache_dir = (cache.path / "cache").string();
  opt.search_source_tree = false;  // the shared copy would be found first
  opt.download_timeout_seconds = 3;
  CwdGuard cwd(a.path);
  const auto t0 = std::chrono::steady_clock::now();
  std::string path, msg;
  try {
    path = ablate::resolve_data_file("tinyshakespeare.txt", a.path.string(), opt);
  } catch (const ablate::Error& e) {
    msg = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 10);
  if (!path.empty()) {  // online: the file is in the cache and verified
    CHECK(path == opt.cache_dir + "/tinyshakespeare.txt");
    CHECK(ablate::sha256_hex(ablate::read_text_file(path)) == kShakespeareSha);
  } else {
    INFO(msg);
    CHECK(contains(msg, "data file 'tinyshakespeare.txt' not found. Searched:"));
    CHECK(contains(msg, (a.path / "tinyshakespeare.txt").string()));
    CHECK(contains(msg, opt.cache_dir + "/tinyshakespeare.txt"));
    CHECK(contains(
        msg,
        "Downloading it from https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
        "tinyshakespeare/input.txt failed: "));
    CHECK(contains(msg, "ABLATE_DATA_PATH"));
    CHECK(contains(msg, "put tinyshakespeare.txt in one of the places above"));
    // No partial download is left in the cache.
    if (fs::exists(opt.cache_dir))
      for (const auto& e : fs::directory_iterator(opt.cache_dir))
        FAIL_CHECK("left behind: " << e.path());
    // wget when there is no curl; a clear word when there is neither.
    TempDir bin;
    EnvGuard path_env("PATH", bin.path.string());
    if (fs::exists("/usr/bin/wget")) {
      fs::create_symlink("/usr/bin/wget", bin.path / "wget");
      msg =
          error_of([&] { ablate::resolve_data_file("tinyshakespeare.txt", a.path.string(), opt); });
      CHECK(contains(msg, "failed: " + (bin.path / "wget").string() + " exited with status"));
      fs::remove(bin.path / "wget");
    }
    msg = error_of([&] { ablate::resolve_data_file("tinyshakespeare.txt", a.path.string(), opt); });
    CHECK(contains(msg, "failed: neither curl nor wget is installed"));
  }
}

TEST_CASE("io/data: read_text_file checks") {
  TempDir dir;
  CHECK(ablate::read_text_file(kTestData + "/shakespeare_16k.txt").size() == 16384);
  const std::string good = dir.file("good.txt", "naïve café — ✓ 𝄞\n");
  CHECK(ablate::read_text_file(good) == "naïve café — ✓ 𝄞\n");
  const std::string empty = dir.file("empty.txt", "");
  CHECK(error_of([&] { ablate::read_text_file(empty); }) == empty + ": text file is empty");
  const std::string missing = (dir.path / "missing.txt").string();
  CHECK(error_of([&] { ablate::read_text_file(missing); }) ==
        missing + ": cannot read text file: no such file");
  CHECK(contains(error_of([&] { ablate::read_text_file(dir.path.string()); }), "is a directory"));

  const std::string latin1 = dir.file("latin1.txt", "line one\ncaf\xe9 au lait\n");
  std::string msg = error_of([&] { ablate::read_text_file(latin1); });
  CHECK(
      contains(msg, latin1 + ": not valid UTF-8 at byte offset 12 (line 2, column 4): byte 0xE9"));
  CHECK(contains(msg, "iconv"));
  const std::string cut = dir.file("cut.txt", "ok \xe2\x9c");  // a 3-byte character cut short
  CHECK(contains(error_of([&] { ablate::read_text_file(cut); }),
                 "byte offset 3 (line 1, column 4): byte 0xE2 starts a sequence cut off"));
  // Overlong encodings, UTF-16 surrogates and code points above U+10FFFF are not UTF-8.
  for (const std::string bad :
       {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xff"}) {
    const std::string p = dir.file("bad.txt", "ab" + bad);
    CHECK(
        contains(error_of([&] { ablate::read_text_file(p); }), "byte offset 2 (line 1, column 3)"));
  }
}
