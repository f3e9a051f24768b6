// Named datasets (data: {dataset: NAME}; ablate/datasets.hpp): the zip reader against Python's
// zipfile, the byte splits of enwik8 and text8 and TinyStories' published files, each on a
// small file of the published name standing in for the download (in a temporary data
// directory, the cache in a temporary HOME): the real code path on small data. Split files
// and token shards are made once and again when the source changes; tinyshakespeare through
// the table is data: {path: tinyshakespeare.txt}; offline, the error gives the command that
// downloads the file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/data.hpp"
#include "ablate/data_source.hpp"
#include "ablate/datasets.hpp"
#include "ablate/experiment.hpp"
#include "ablate/runfile.hpp"
#include "ablate/shards.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

using ablate::test::contains;
using ablate::test::error_of;

namespace {

// Sets (or unsets) an environment variable for the guard's lifetime.
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

// A temporary HOME (the cache is HOME/.cache/ablate/data) and data directory (ABLATE_DATA_PATH).
struct Sandbox {
  ablate::test::TempDir dir;
  EnvGuard home{"HOME", (dir.path / "home").string()};
  EnvGuard data{"ABLATE_DATA_PATH", (dir.path / "data").string()};
  Sandbox() { fs::create_directories(dir.path / "data"); }
  std::string cache() const { return (dir.path / "home/.cache/ablate/data").string(); }
  std::string data_file(const std::string& name) const {
    return (dir.path / "data" / name).string();
  }
};

std::string write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// A zip archive at zip_path holding `member` (deflated, or stored), written by Python's zipfile.
void python_zip(const std::string& zip_path, const std::string& member, const std::string& bytes,
                bool stored = false) {
  const std::string raw = write_bytes(zip_path + ".raw", bytes);
  const auto r = ablate::test::run_command(
      "/usr/bin/python3 -c \"import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], 'a', zipfile." +
      std::string(stored ? "ZIP_STORED" : "ZIP_DEFLATED") +
      "); z.writestr(sys.argv[3], open(sys.argv[2], 'rb').read()); z.close()\" '" + zip_path +
      "' '" + raw + "' '" + member + "'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  fs::remove(raw);
}

// n bytes of Shakespeare with bytes that are not UTF-8 in it and a two-byte character at `split`-1.
std::string stand_in(size_t n, size_t split) {
  const std::string s =
      ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
  std::string t;
  while (t.size() < n) t += s;
  t.resize(n);
  t[100] = '\xff';
  t[101] = '\xfe';
  t[split - 1] = '\xc3';  // é, cut by the split
  t[split] = '\xa9';
  return t;
}

std::unique_ptr<ablate::Tokenizer> tokenizer(const std::string& yaml) {
  auto& reg = ablate::test::registry();
  ablate::Options o(YAML::Load(yaml), std::make_shared<ablate::ConfigSource>(), "tokenizer");
  return reg.create<ablate::Tokenizer>(o, ablate::StandaloneContext());
}

ablate::TextData load(const std::string& data_yaml, ablate::Tokenizer& tok,
                      const std::string& tok_key, int64_t context = 16) {
  auto exp = ablate::Experiment::parse("data: " + data_yaml, "test.yaml", ".");
  return *ablate::load_shared_text_data(exp.root().child("data"), ".", tok, tok_key, context);
}

// Every token of a split's shards, in order.
std::vector<int32_t> shard_tokens(const ablate::ShardSplit& s) {
  std::vector<int32_t> out;
  for (const auto& sh : s.shards) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(sh.size()));
    sh.copy(0, sh.size(), out.data() + at);
  }
  return out;
}

std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

fs::file_time_type mtime(const std::string& p) { return fs::last_write_time(p); }

}  // namespace

TEST_CASE("datasets/the table: tinyshakespeare, enwik8, text8, tinystories with their splits") {
  std::vector<std::string> names;
  for (const auto& d : ablate::named_datasets()) names.push_back(d.name);
  CHECK(names == std::vector<std::string>{"tinyshakespeare", "enwik8", "text8", "tinystories"});
  const auto* e = ablate::find_named_dataset("enwik8");
  REQUIRE(e);
  CHECK(std::string(e->file) == "enwik8.zip");
  CHECK(std::string(e->member) == "enwik8");
  CHECK(e->train_parts * 100000000 / (e->train_parts + e->val_parts + e->test_parts) == 90000000);
  CHECK(e->val_parts * 100000000 / (e->train_parts + e->val_parts + e->test_parts) == 5000000);
  CHECK(e->text_bytes == 100000000);
  const auto* t = ablate::find_named_dataset("tinystories");
  REQUIRE(t);
  CHECK(std::string(t->val_file) == "TinyStoriesV2-GPT4-valid.txt");
  CHECK(std::string(t->text_sha256).empty());  // none published: the sizes are compared
  CHECK(t->val_bytes == 22502601);
  CHECK(ablate::find_named_dataset("enwik9") == nullptr);
}

TEST_CASE(
    "datasets/unzip_member reads Python's stored and deflated members and refuses damaged "
    "archives") {
  ablate::test::TempDir dir;
  std::string big;  // 3 MB, more than one inflate buffer, compressible but not trivially
  for (int64_t i = 0; big.size() < 3000000; ++i)
    big += std::to_string(i * 7919 % 100003) + (i % 13 ? " " : "\n");
  const std::string zip = dir / "a.zip";
  python_zip(zip, "big", big);
  python_zip(zip, "small", "stored bytes \xff\n", true);
  auto read = [&](const std::string& member) {
    std::string out;
    ablate::unzip_member(zip, member, [&](const char* p, size_t n) { out.append(p, n); });
    return out;
  };
  CHECK(read("big") == big);
  CHECK(read("small") == "stored bytes \xff\n");
  CHECK(ablate::zip_member_size(zip, "big") == static_cast<int64_t>(big.size()));
  CHECK(contains(error_of([&] { read("enwik8"); }), "holds no 'enwik8' (it holds: big, small)"));
  // A flipped byte in the deflated data: zlib or the CRC-32 says so.
  std::string bytes = ablate::test::read_file(zip);
  bytes[bytes.size() / 3] ^= 0x55;
  const std::string bad = write_bytes(dir / "bad.zip", bytes);
  const std::string msg =
      error_of([&] { ablate::unzip_member(bad, "big", [](const char*, size_t) {}); });
  CHECK(contains(msg, bad + ": member 'big'"));
  CHECK(contains(msg, "download it again"));
  const std::string text = write_bytes(dir / "text.zip", "not an archive at all");
  CHECK(contains(error_of([&] { ablate::unzip_member(text, "x", [](const char*, size_t) {}); }),
                 "not a zip archive"));
}

TEST_CASE(
    "datasets/enwik8 from a stand-in archive: its 90/5/5 byte split as text and as token shards, "
    "made once") {
  Sandbox box;
  const std::string text = stand_in(20000, 18000);
  python_zip(box.data_file("enwik8.zip"), "enwik8", text);

  // A tokenizer fitted on text reads the split files: exact bytes, a character cut by the split.
  auto chr = tokenizer("char");
  const ablate::TextData c = load("{dataset: enwik8}", *chr, "char");
  CHECK(c.train_text == text.substr(0, 18000));
  CHECK(c.val_text == text.substr(18000, 1000));
  CHECK(chr->decode(c.train) == c.train_text);
  const std::string dir = box.cache() + "/enwik8";
  CHECK(c.path == dir);
  CHECK(ablate::test::read_file(dir + "/test.txt") == text.substr(19000));
  const auto splits = nlohmann::json::parse(ablate::test::read_file(dir + "/splits.json"));
  CHECK(splits["published"] == false);  // not the published enwik8: said on stderr
  CHECK(splits["text_bytes"] == 20000);
  CHECK(splits["sha256"] == ablate::sha256_hex(text));
  CHECK(c.sha256 == ablate::sha256_hex(text));

  // A ready-made tokenizer: token shards of the same splits, made with it.
  auto byte = tokenizer("byte");
  const ablate::TextData b = load("{dataset: enwik8}", *byte, "byte");
  REQUIRE(b.from_shards());
  CHECK(shard_tokens(*b.train_shards) == bytes_of(text.substr(0, 18000)));
  CHECK(shard_tokens(*b.val_shards) == bytes_of(text.substr(18000, 1000)));
  const std::string shards = b.path;
  CHECK(fs::path(shards).parent_path() == dir);
  CHECK(fs::path(shards).filename().string() ==
        "shards-" + ablate::sha256_hex(byte->save()).substr(0, 12));
  const auto manifest = nlohmann::json::parse(ablate::test::read_file(shards + "/manifest.json"));
  CHECK(manifest["tokenizer"]["name"] == "byte");
  CHECK(manifest["bytes"]["train"] == 18000);

  // Once: a second load reads what the first made.
  const auto split_time = mtime(dir + "/splits.json"),
             manifest_time = mtime(shards + "/manifest.json");
  auto byte2 = tokenizer("byte");
  CHECK(shard_tokens(*load("{dataset: enwik8}", *byte2, "byte").val_shards) ==
        bytes_of(text.substr(18000, 1000)));
  CHECK(mtime(dir + "/splits.json") == split_time);
  CHECK(mtime(shards + "/manifest.json") == manifest_time);
  // Another tokenizer: shards of their own beside them.
  auto eot = tokenizer("{type: byte, eot: true}");
  const ablate::TextData e =
      load("{dataset: enwik8, align: documents}", *eot, "{type: byte, eot: true}");
  CHECK(e.path != shards);
  CHECK(shard_tokens(*e.val_shards).front() ==
        256);  // the end-of-text id before the split's one document
  CHECK(fs::exists(shards + "/manifest.json"));

  // eval_on: test scores the test split as validation (the number to compare with published ones).
  auto chr3 = tokenizer("char");
  CHECK(load("{dataset: enwik8, eval_on: test}", *chr3, "char").val_text == text.substr(19000));
  auto byte3 = tokenizer("byte");
  const ablate::TextData bt = load("{dataset: enwik8, eval_on: test}", *byte3, "byte");
  CHECK(shard_tokens(*bt.val_shards) == bytes_of(text.substr(19000)));
  CHECK(shard_tokens(*bt.train_shards) == bytes_of(text.substr(0, 18000)));
  CHECK(bt.path == shards + "-test");

  // A changed source is split again, and the old shards go.
  const std::string other = stand_in(30000, 27000);
  fs::remove(box.data_file("enwik8.zip"));
  python_zip(box.data_file("enwik8.zip"), "enwik8", other);
  auto chr2 = tokenizer("char");
  const ablate::TextData c2 = load("{dataset: enwik8}", *chr2, "char");
  CHECK(c2.train_text == other.substr(0, 27000));
  CHECK(c2.val_text == other.substr(27000, 1500));
  CHECK(!fs::exists(shards));
}

TEST_CASE(
    "datasets/text8 and an unpacked member: the member found in the data directories is split as "
    "it is") {
  Sandbox box;
  std::string text;
  for (int i = 0; text.size() < 4000; ++i)
    text += "anarchism originated as a term of abuse " + std::to_string(i % 10);
  text.resize(4000);
  write_bytes(box.data_file("text8"), text);  // unzipped already: no text8.zip anywhere
  auto chr = tokenizer("char");
  const ablate::TextData d = load("{dataset: text8}", *chr, "char");
  CHECK(d.train_text == text.substr(0, 3600));
  CHECK(d.val_text == text.substr(3600, 200));
  CHECK(ablate::test::read_file(box.cache() + "/text8/test.txt") == text.substr(3800));
}

TEST_CASE("datasets/tinyshakespeare through the table is data: {path: tinyshakespeare.txt}") {
  const std::string shared = std::string(ABLATE_SOURCE_DIR) + "/../shared/data/tinyshakespeare.txt";
  if (!fs::exists(shared)) {
    MESSAGE("skipped: " << shared << " not present");
    return;
  }
  Sandbox box;
  auto a = tokenizer("char"), b = tokenizer("char");
  const ablate::TextData named = load("{dataset: tinyshakespeare}", *a, "char");
  const ablate::TextData path = load("{path: tinyshakespeare.txt}", *b, "char");
  CHECK(named.train == path.train);
  CHECK(named.val == path.val);
  CHECK(named.sha256 == path.sha256);  // the published file's SHA-256
  const auto splits =
      nlohmann::json::parse(ablate::test::read_file(box.cache() + "/tinyshakespeare/splits.json"));
  CHECK(splits["published"] == true);
  CHECK(!fs::exists(box.cache() + "/tinyshakespeare/test.txt"));  // no test split
}

TEST_CASE(
    "datasets/tinystories from stand-in files: the published files are the splits, stories cut at "
    "<|endoftext|>") {
  Sandbox box;
  std::string train, val;
  // As the published files: stories on lines of their own between <|endoftext|> lines.
  for (int i = 0; i < 30; ++i)
    train += (i ? "\n<|endoftext|>\n" : "") +
             ("Once upon a time there was a cat number " + std::to_string(i) + ".");
  for (int i = 0; i < 5; ++i)
    val += (i ? "\n<|endoftext|>\n" : "") +
           ("Lily saw a dog number " + std::to_string(i) + " in the park.");
  write_bytes(box.data_file("TinyStoriesV2-GPT4-train.txt"), train);
  write_bytes(box.data_file("TinyStoriesV2-GPT4-valid.txt"), val);
  auto eot = tokenizer("{type: byte, eot: true}");
  const ablate::TextData d =
      load("{dataset: tinystories, align: documents}", *eot, "{type: byte, eot: true}", 8);
  REQUIRE(d.from_shards());
  const auto manifest = nlohmann::json::parse(ablate::test::read_file(d.path + "/manifest.json"));
  CHECK(manifest["documents"]["train"] == 30);
  CHECK(manifest["documents"]["val"] == 5);
  CHECK(manifest["split"]["separator"] == "<|endoftext|>");
  CHECK(manifest["tokenizer"]["options"]["eot"] == true);
  CHECK(d.val_shards->starts.at(0).size() == 5);  // a window may start at each story
  // Read as text, the files are the splits as they are.
  auto chr = tokenizer("char");
  const ablate::TextData t = load("{dataset: tinystories}", *chr, "char");
  CHECK(t.train_text == train);
  CHECK(t.val_text == val);
  auto chr2 = tokenizer("char");
  CHECK(contains(error_of([&] { load("{dataset: tinystories, align: documents}", *chr2, "char"); }),
                 "remove align"));
}

TEST_CASE(
    "datasets/offline or wrong: the error gives the download command, names the known datasets, "
    "refuses other keys") {
  Sandbox box;
  ablate::test::TempDir bin;
  EnvGuard path(
      "PATH",
      bin.path.string());  // neither curl nor wget: nothing is downloaded, whatever the network
  auto byte = tokenizer("byte");
  std::string msg = error_of([&] { load("{dataset: enwik8}", *byte, "byte"); });
  INFO(msg);
  CHECK(contains(msg, "data.dataset"));
  CHECK(contains(msg, "'enwik8': data file 'enwik8.zip' not found. Searched:"));
  CHECK(contains(msg, box.data_file("enwik8.zip")));
  CHECK(contains(msg,
                 "Downloading it from http://mattmahoney.net/dc/enwik8.zip failed: neither curl "
                 "nor wget is installed"));
  CHECK(contains(
      msg, "curl -fL -o " + box.cache() + "/enwik8.zip http://mattmahoney.net/dc/enwik8.zip"));
  msg = error_of([&] { load("{dataset: tinystories}", *byte, "byte"); });
  CHECK(contains(msg, "curl -fL -o " + box.cache() +
                          "/TinyStoriesV2-GPT4-train.txt "
                          "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/"
                          "TinyStoriesV2-GPT4-train.txt"));
  msg = error_of([&] { load("{dataset: text8}", *byte, "byte"); });
  CHECK(contains(msg,
                 "curl -fL -o " + box.cache() + "/text8.zip http://mattmahoney.net/dc/text8.zip"));
  // Nothing half-made is left in the cache.
  for (const auto& e : fs::recursive_directory_iterator(box.cache()))
    if (e.is_regular_file())
      CHECK_MESSAGE(e.path().filename() == ".lock", "left behind: " << e.path());

  msg = error_of([&] { load("{dataset: enwik9}", *byte, "byte"); });
  CHECK(contains(msg,
                 "unknown dataset 'enwik9'; known: tinyshakespeare, enwik8, text8, tinystories. "
                 "Did you mean 'enwik8'?"));
  msg = error_of([&] { load("{dataset: enwik8, train_fraction: 0.5}", *byte, "byte"); });
  CHECK(contains(msg, "train_fraction does not apply to a named dataset"));
  msg = error_of([&] { load("{dataset: tinystories, eval_on: test}", *byte, "byte"); });
  CHECK(contains(msg, "'tinystories' has no test split (only enwik8 and text8 do)"));
}

TEST_CASE(
    "datasets/ablate run on data: {dataset: enwik8}: prepared on first use, val_bpb recorded, "
    "reused by the next run") {
  Sandbox box;
  const std::string text = stand_in(20000, 18000);
  python_zip(box.data_file("enwik8.zip"), "enwik8", text);
  const std::string yaml = box.dir.write("enwik8.yaml", R"(name: enwik8
data: {dataset: enwik8}
tokenizer: byte
model: {d_model: 16, n_heads: 2, n_layers: 1, context: 16}
train: {steps: 10, batch_size: 4, eval_every: 10, eval_batches: 2, eval_full: true, threads: 1}
sample: {tokens: 0}
)");
  const std::string env =
      "HOME='" + (box.dir / "home") + "' ABLATE_DATA_PATH='" + (box.dir / "data") + "' ";
  const auto first = ablate::test::run_command(env + ablate::test::ablate_binary() + " run " +
                                               yaml + " -o " + (box.dir / "a"));
  INFO(first.output);
  REQUIRE(first.status == 0);
  CHECK(contains(first.output,
                 "dataset 'enwik8': unpacking and splitting " + box.data_file("enwik8.zip")));
  CHECK(contains(first.output,
                 "not the published text (100,000,000 bytes, sha256 2b49720ec4d78c3c...)"));
  CHECK(contains(first.output, "dataset 'enwik8': tokenizing it into token shards"));
  const auto d = ablate::read_run_file(ablate::run_file_path(box.dir / "a"));
  CHECK(contains(d.str_attrs.at("data_file"), box.cache() + "/enwik8/shards-"));
  const auto& vl = d.tables.at("eval").at("val_loss");
  const auto& vb = d.tables.at("eval").at("val_bpb");
  CHECK(vb.back() == doctest::Approx(vl.back() / std::log(2.0)).epsilon(1e-9));
  const auto again = ablate::test::run_command(env + ablate::test::ablate_binary() + " run " +
                                               yaml + " -o " + (box.dir / "b"));
  INFO(again.output);
  REQUIRE(again.status == 0);
  CHECK(!contains(again.output, "first use"));
  CHECK(ablate::read_run_file(ablate::run_file_path(box.dir / "b"))
            .tables.at("eval")
            .at("val_loss") == vl);
}
