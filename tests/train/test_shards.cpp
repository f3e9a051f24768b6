// Token shards (ablate/shards.hpp): files written by numpy as llm.c's write_datafile and
// nanoGPT's np.memmap write them, read back by ablate token for token; ablate's shards read
// back by numpy; every damaged file refused with a message that says what is wrong. Training
// from shards (data.shards, data.train/val): windows inside one shard in proportion to its
// size, aligned to documents, the whole validation part in consecutive windows; a run from a
// nanoGPT train.bin of a text's bytes is the run on the text, bitwise, and an interrupted
// run resumes to the uninterrupted one.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ablate/checkpoint.hpp"
#include "ablate/data.hpp"
#include "ablate/experiment.hpp"
#include "ablate/runfile.hpp"
#include "ablate/shards.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

using ablate::test::contains;
using ablate::test::error_of;

namespace {

// The ids the Python writers and the checks below agree on: token i of a test file.
uint32_t id16(int64_t i) { return static_cast<uint32_t>((i * 7919 + 13) % 50257); }
uint32_t id32(int64_t i) { return static_cast<uint32_t>((i * 48271 + 5) % 200003); }

bool have_numpy() {
  return ablate::test::run_command("/usr/bin/python3 -c 'import numpy'").status == 0;
}

// Runs a Python script (with numpy) and returns its output; a failure fails the test.
std::string python(const ablate::test::TempDir& dir, const std::string& script,
                   const std::string& args) {
  const std::string path = dir.write("script.py", script);
  auto r = ablate::test::run_command("/usr/bin/python3 " + path + " " + args);
  INFO(r.output);
  REQUIRE(r.status == 0);
  return r.output;
}

// llm.c's dev/data/data_common.py write_datafile, and its uint32 variant; nanoGPT's
// prepare.py (np.memmap of uint16, no header).
const char* kNumpyWriters = R"(import sys
import numpy as np
kind, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
i = np.arange(n, dtype=np.int64)
if kind == 'u16':
    toks = ((i * 7919 + 13) % 50257).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[0] = 20240520; header[1] = 1; header[2] = len(toks)
    with open(path, 'wb') as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())
elif kind == 'u32':
    toks = ((i * 48271 + 5) % 200003).astype(np.uint32)
    header = np.zeros(256, dtype=np.int32)
    header[0] = 20240801; header[1] = 7; header[2] = len(toks)
    with open(path, 'wb') as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())
else:
    toks = ((i * 7919 + 13) % 50257).astype(np.uint16)
    arr = np.memmap(path, dtype=np.uint16, mode='w+', shape=(n,))
    arr[:] = toks
    arr.flush()
)";

// Reads a shard as llm.c's and modded-nanogpt's loaders do and checks every token.
const char* kNumpyReader = R"(import sys
import numpy as np
path, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
header = np.fromfile(path, dtype=np.int32, count=256)
magic, version, count = int(header[0]), int(header[1]), int(header[2])
want = (20240520, 1) if kind == 'u16' else (20240801, 7)
assert (magic, version) == want, (magic, version)
assert count == n, (count, n)
dtype = np.uint16 if kind == 'u16' else np.uint32
with open(path, 'rb') as f:
    f.seek(256 * 4)
    toks = np.frombuffer(f.read(), dtype=dtype)
assert len(toks) == count, (len(toks), count)
i = np.arange(n, dtype=np.int64)
ref = (i * 7919 + 13) % 50257 if kind == 'u16' else (i * 48271 + 5) % 200003
bad = np.nonzero(toks.astype(np.int64) != ref)[0]
assert len(bad) == 0, ('first differing token', int(bad[0]))
print('ok', count)
)";

std::string bytes_of(const std::vector<int32_t>& header, const std::vector<uint16_t>& tokens) {
  std::string s(header.size() * 4 + tokens.size() * 2, '\0');
  if (!header.empty()) std::memcpy(s.data(), header.data(), header.size() * 4);
  if (!tokens.empty()) std::memcpy(s.data() + header.size() * 4, tokens.data(), tokens.size() * 2);
  return s;
}

std::vector<int32_t> header(int32_t magic, int32_t version, int32_t count) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic, h[1] = version, h[2] = count;
  return h;
}

}  // namespace

TEST_CASE(
    "shards/llm.c, its uint32 variant and nanoGPT's raw files written by numpy read back token for "
    "token") {
  if (!have_numpy()) {
    MESSAGE("skipped: /usr/bin/python3 cannot import numpy (apt install python3-numpy)");
    return;
  }
  ablate::test::TempDir dir;
  const int64_t n = 300007;  // more than one chunk of a parallel scan is not needed; odd on purpose
  python(dir, kNumpyWriters, "u16 " + (dir / "fineweb_train_000001.bin") + " " + std::to_string(n));
  python(dir, kNumpyWriters, "u32 " + (dir / "big_train_000001.bin") + " " + std::to_string(n));
  python(dir, kNumpyWriters, "raw " + (dir / "train.bin") + " " + std::to_string(n));

  const ablate::Shard a = ablate::Shard::open(dir / "fineweb_train_000001.bin");
  CHECK(a.format() == ablate::ShardFormat::kUint16);
  CHECK(a.size() == n);
  CHECK(a.file_bytes() == 1024 + 2 * n);
  const ablate::Shard b = ablate::Shard::open(dir / "big_train_000001.bin");
  CHECK(b.format() == ablate::ShardFormat::kUint32);
  CHECK(b.size() == n);
  const ablate::Shard c = ablate::Shard::open(dir / "train.bin", ablate::ShardLayout::kRaw);
  CHECK(c.format() == ablate::ShardFormat::kRaw16);
  CHECK(c.size() == n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    wrong += (a[i] != id16(i)) + (b[i] != id32(i)) + (c[i] != id16(i));
  CHECK(wrong == 0);
  std::vector<int32_t> window(100);
  a.copy(n - 100, 100, window.data());
  for (int64_t k = 0; k < 100; ++k)
    CHECK(window[static_cast<size_t>(k)] == static_cast<int32_t>(id16(n - 100 + k)));
  b.copy(5, 100, window.data());
  for (int64_t k = 0; k < 100; ++k)
    CHECK(window[static_cast<size_t>(k)] == static_cast<int32_t>(id32(5 + k)));

  CHECK(a.max_id() == 50256);
  CHECK(b.max_id() == 200002);
  CHECK(a.first_at_least(50257) == -1);
  int64_t first_big = 0;
  while (id32(first_big) < 100000) ++first_big;
  CHECK(b.first_at_least(100000) == first_big);
  const std::vector<int64_t> where = a.positions_of(id16(777));
  REQUIRE(!where.empty());
  CHECK(where.front() == 777 % 50257);
  for (int64_t p : where) CHECK(a[p] == id16(777));
  a.release();  // the mapping stays valid after its pages are handed back
  CHECK(a[12345] == id16(12345));
}

TEST_CASE(
    "shards/ablate's shards (uint16 and uint32) read by numpy as llm.c reads them, nothing under "
    "the final name before close") {
  if (!have_numpy()) {
    MESSAGE("skipped: /usr/bin/python3 cannot import numpy (apt install python3-numpy)");
    return;
  }
  ablate::test::TempDir dir;
  const int64_t n = 2500000;  // more than the writer's buffer
  for (auto format : {ablate::ShardFormat::kUint16, ablate::ShardFormat::kUint32}) {
    const bool u16 = format == ablate::ShardFormat::kUint16;
    const std::string path = dir / (u16 ? "a_train_000001.bin" : "b_train_000001.bin");
    {
      ablate::ShardWriter w(path, format);
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < n; ++i) {
        ids.push_back(static_cast<int32_t>(u16 ? id16(i) : id32(i)));
        if (ids.size() == 99991 || i + 1 == n) {
          w.append(ids.data(), ids.size());
          ids.clear();
        }
      }
      CHECK(w.tokens() == n);
      CHECK(!fs::exists(path));  // written under path.tmp until close
      CHECK(fs::exists(path + ".tmp"));
      w.close();
    }
    CHECK(!fs::exists(path + ".tmp"));
    CHECK(fs::file_size(path) == static_cast<uintmax_t>(1024 + (u16 ? 2 : 4) * n));
    CHECK(contains(python(dir, kNumpyReader, path + (u16 ? " u16 " : " u32 ") + std::to_string(n)),
                   "ok " + std::to_string(n)));
    const ablate::Shard s = ablate::Shard::open(path);
    CHECK(s.size() == n);
    CHECK(s[n - 1] == (u16 ? id16(n - 1) : id32(n - 1)));
  }
  // A writer destroyed before close (an error half-way) leaves nothing behind.
  {
    ablate::ShardWriter w(dir / "c_val_000000.bin", ablate::ShardFormat::kUint16);
    const int32_t ids[3] = {1, 2, 3};
    w.append(ids, 3);
  }
  CHECK(!fs::exists(dir / "c_val_000000.bin"));
  CHECK(!fs::exists(dir / "c_val_000000.bin.tmp"));
  // uint16 cannot hold 65,536: the error names the id and the uint32 format.
  ablate::ShardWriter w(dir / "d.bin", ablate::ShardFormat::kUint16);
  const int32_t big[2] = {7, 70000};
  const std::string e = error_of([&] { w.append(big, 2); });
  CHECK(contains(e, "d.bin: token 1 is id 70000"));
  CHECK(contains(e, "uint32 tokens, magic 20240801"));
  CHECK(ablate::shard_format_for_vocab(50257) == ablate::ShardFormat::kUint16);
  CHECK(ablate::shard_format_for_vocab(65536) == ablate::ShardFormat::kUint16);
  CHECK(ablate::shard_format_for_vocab(65537) == ablate::ShardFormat::kUint32);
}

TEST_CASE(
    "shards/a damaged or foreign file is refused naming the file, what was found and what is "
    "expected") {
  ablate::test::TempDir dir;
  const std::vector<uint16_t> toks{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto open = [&](const std::string& name, const std::string& bytes,
                  ablate::ShardLayout layout = ablate::ShardLayout::kHeader) {
    const std::string path = dir.write(name, bytes);
    return error_of([&] { ablate::Shard::open(path, layout); });
  };
  // Wrong magic: the value found, the formats that exist, the raw format for nanoGPT files.
  std::string e = open("m.bin", bytes_of(header(12345, 1, 10), toks));
  CHECK(contains(
      e, "m.bin: not an llm.c token shard: its first int32 (the magic) is 12345 (0x00003039)"));
  CHECK(contains(e, "20240520 (llm.c shard, uint16 tokens, version 1)"));
  CHECK(contains(e, "20240801 (llm.c uint32 variant, version 7)"));
  CHECK(contains(e, "data.format: raw"));
  // A nanoGPT file read as a header shard: the same message.
  e = open("train.bin", std::string(reinterpret_cast<const char*>(toks.data()), 20));
  CHECK(contains(e, "train.bin: 20 bytes, shorter than the 1024-byte header"));
  CHECK(contains(e, "data.format: raw"));
  // Wrong version.
  e = open("v.bin", bytes_of(header(20240520, 3, 10), toks));
  CHECK(contains(
      e,
      "v.bin: llm.c shard with magic 20240520 but version 3; magic 20240520 goes with version 1"));
  e = open("v32.bin", bytes_of(header(20240801, 1, 5), toks));
  CHECK(contains(e, "magic 20240801 goes with version 7"));
  // Truncated body: the offset, the size the count implies, the size found.
  e = open("t.bin", bytes_of(header(20240520, 1, 1000), toks));
  CHECK(contains(
      e,
      "t.bin: truncated: the header counts 1000 tokens, so the file should be 3024 bytes (1024 + "
      "1000 x 2), "
      "but it has 1044 bytes; the tokens stop at byte offset 1044 (after token 10 of 1000)"));
  e = open("long.bin", bytes_of(header(20240520, 1, 4), toks));
  CHECK(contains(e, "long.bin: the header counts 4 tokens, so the file should be 1032 bytes"));
  CHECK(contains(e, "12 bytes after the last token (byte offset 1032)"));
  e = open("neg.bin", bytes_of(header(20240520, 1, -4), toks));
  CHECK(contains(e, "token count (int32 at byte offset 8) is -4"));
  // A raw file of odd length; a raw read of an llm.c shard.
  e = open("odd.bin", std::string(21, 'x'), ablate::ShardLayout::kRaw);
  CHECK(contains(e, "odd.bin: 21 bytes, an odd length"));
  CHECK(contains(e, "half a token at byte offset 20"));
  e = open("hdr.bin", bytes_of(header(20240520, 1, 10), toks), ablate::ShardLayout::kRaw);
  CHECK(contains(e, "starts with llm.c's shard magic 20240520"));
  e = error_of([&] { ablate::Shard::open(dir / "absent.bin"); });
  CHECK(contains(e, "absent.bin: cannot open token shard: No such file or directory"));
  // An empty shard is a shard.
  CHECK(ablate::Shard::open(dir.write("empty.bin", bytes_of(header(20240520, 1, 0), {}))).size() ==
        0);
  // Ids at or above the vocabulary: the first offset and id, the vocabulary size and the fix.
  const std::vector<uint16_t> ids{5, 250, 255, 256, 300, 7};
  const ablate::Shard s =
      ablate::Shard::open(dir.write("ids.bin", bytes_of(header(20240520, 1, 6), ids)));
  CHECK_NOTHROW(ablate::check_shard_ids(s, 301, "FIX"));
  e = error_of(
      [&] { ablate::check_shard_ids(s, 256, "Use the tokenizer the shards were made with."); });
  CHECK(contains(
      e,
      "ids.bin: token 3 (byte offset 1030) is id 256, but the vocabulary has 256 ids (0 to 255)"));
  CHECK(contains(e, "Use the tokenizer the shards were made with."));
}

namespace {

// A shard of the given ids (uint16 llm.c, or raw uint16 with raw = true).
std::string write_shard(const std::string& path, const std::vector<int32_t>& ids,
                        bool raw = false) {
  ablate::ShardWriter w(path, raw ? ablate::ShardFormat::kRaw16 : ablate::ShardFormat::kUint16);
  w.append(ids.data(), ids.size());
  w.close();
  return path;
}

std::unique_ptr<ablate::Tokenizer> tokenizer(const std::string& yaml) {
  auto& reg = ablate::test::registry();
  ablate::Options o(YAML::Load(yaml), std::make_shared<ablate::ConfigSource>(), "tokenizer");
  return reg.create<ablate::Tokenizer>(o, ablate::StandaloneContext());
}

// The data section `yaml` (a flow map) of an experiment in dir, loaded with `tok`.
ablate::TextData load(const ablate::test::TempDir& dir, const std::string& yaml,
                      ablate::Tokenizer& tok, int64_t context) {
  auto exp = ablate::Experiment::parse("data: " + yaml, "test.yaml", dir.path.string());
  return ablate::load_text_data(exp.root().child("data"), dir.path.string(), tok, context);
}

std::string load_error(const ablate::test::TempDir& dir, const std::string& yaml,
                       const std::string& tok_yaml, int64_t context = 8) {
  auto tok = tokenizer(tok_yaml);
  return error_of([&] { load(dir, yaml, *tok, context); });
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Every table column but the wall-clock ones, and every tensor of the final checkpoints, bitwise.
void check_same_training(const std::string& a_dir, const std::string& b_dir) {
  const auto a = ablate::read_run_file(ablate::run_file_path(a_dir)),
             b = ablate::read_run_file(ablate::run_file_path(b_dir));
  for (const char* table : {"train", "eval"})
    for (const auto& column : a.tables.at(table)) {
      const std::string& col = column.first;
      const auto& values = column.second;
      if (col == "tokens_per_s") continue;
      INFO(table << "." << col);
      REQUIRE(b.tables.at(table).count(col));
      CHECK(same_bits(values, b.tables.at(table).at(col)));
    }
  CHECK(a.texts.at("samples/final") == b.texts.at("samples/final"));
  const auto ca = ablate::read_checkpoint(ablate::checkpoint_path(a_dir)),
             cb = ablate::read_checkpoint(ablate::checkpoint_path(b_dir));
  REQUIRE(ca.tensors.size() == cb.tensors.size());
  for (const auto& tensor : ca.tensors) {
    const std::string& name = tensor.first;
    const auto& v = tensor.second;
    INFO(name);
    REQUIRE(cb.tensors.count(name));
    CHECK((v.size() == cb.tensors.at(name).size() &&
           std::memcmp(v.data(), cb.tensors.at(name).data(), v.size() * 4) == 0));
  }
}

// A tiny byte-level model; `data` is the data section.
std::string tiny_experiment(const std::string& data) {
  return "name: shards\nseed: 5\ndata: " + data + R"(
tokenizer: byte
model: {d_model: 32, n_heads: 4, n_layers: 2, context: 32}
train: {steps: 20, batch_size: 8, eval_every: 10, eval_batches: 3, checkpoint_every: 5, log_every: 5, threads: 1}
optimizer: {type: adamw, lr: 1.0e-2}
sample: {tokens: 24, prompt: "ROMEO:"}
)";
}

std::vector<int32_t> bytes_as_ids(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

}  // namespace

TEST_CASE(
    "shards/windows lie inside one shard, drawn in proportion to the windows each holds, the same "
    "for the same seed") {
  ablate::test::TempDir dir;
  fs::create_directories(dir.path / "s");
  // Shard k holds ids 10 k .. 10 k + 9, so every token tells its shard.
  const int64_t sizes[3] = {1000, 2000, 4000};
  for (int k = 0; k < 3; ++k) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < sizes[k]; ++i) ids.push_back(static_cast<int32_t>(10 * k + i % 10));
    write_shard(dir / ("s/tiny_train_00000" + std::to_string(k + 1) + ".bin"), ids);
  }
  write_shard(dir / "s/tiny_val_000000.bin", std::vector<int32_t>(50, 7));
  auto tok = tokenizer("byte");
  const int64_t T = 8;
  const ablate::TextData d = load(dir, "{shards: s}", *tok, T);
  REQUIRE(d.from_shards());
  CHECK(d.tokens(true) == 7000);
  CHECK(d.tokens(false) == 50);
  CHECK(d.train.empty());
  CHECK(d.path == (dir.path / "s").string());
  CHECK(d.sha256.size() == 64);
  const int64_t B = 20000;
  std::vector<int32_t> x(B * T), y(B * T), x2(B * T), y2(B * T);
  ablate::Rng rng(3), rng2(3);
  ablate::sample_batch(d, true, B, T, rng, x.data(), y.data());
  ablate::sample_batch(d, true, B, T, rng2, x2.data(), y2.data());
  CHECK(x == x2);
  CHECK(y == y2);
  int64_t count[3] = {0, 0, 0}, crossing = 0, wrong = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t k = x[b * T] / 10;
    ++count[k];
    for (int64_t t = 0; t < T; ++t) {
      crossing += x[b * T + t] / 10 != k || y[b * T + t] / 10 != k;
      wrong += y[b * T + t] % 10 != (x[b * T + t] + 1) % 10;  // targets are the next tokens
    }
  }
  CHECK(crossing == 0);
  CHECK(wrong == 0);
  const double windows = (1000 - T) + (2000 - T) + (4000 - T);
  for (int k = 0; k < 3; ++k) {
    const double want = B * (sizes[k] - T) / windows, sd = std::sqrt(want);
    INFO("shard " << k << ": " << count[k] << " windows, expected " << want);
    CHECK(std::fabs(count[k] - want) < 5 * sd);
  }
  // The validation part draws from its own shards.
  ablate::sample_batch(d, false, 4, T, rng, x.data(), y.data());
  for (int64_t i = 0; i < 4 * T; ++i) CHECK(x[static_cast<size_t>(i)] == 7);
}

TEST_CASE(
    "shards/align: documents starts every window at an end-of-text id, consecutive windows cover "
    "every token once") {
  ablate::test::TempDir dir;
  fs::create_directories(dir.path / "d");
  // Documents of 3 to 40 tokens, each after the byte tokenizer's end-of-text id (256 with eot:
  // true).
  std::vector<int32_t> ids;
  std::vector<int64_t> doc_starts;
  for (int doc = 0; doc < 200; ++doc) {
    doc_starts.push_back(static_cast<int64_t>(ids.size()));
    ids.push_back(256);
    for (int i = 0; i < 3 + (doc * 7) % 38; ++i) ids.push_back('a' + (doc + i) % 26);
  }
  write_shard(dir / "d/docs_train_000001.bin", ids);
  write_shard(dir / "d/docs_val_000000.bin", std::vector<int32_t>(ids.begin(), ids.begin() + 300));
  auto tok = tokenizer("{type: byte, eot: true}");
  const int64_t T = 16, B = 500;
  const ablate::TextData d = load(dir, "{shards: d, align: documents}", *tok, T);
  std::vector<int32_t> x(B * T), y(B * T);
  ablate::Rng rng(9);
  ablate::sample_batch(d, true, B, T, rng, x.data(), y.data());
  std::map<int32_t, int> firsts;
  for (int64_t b = 0; b < B; ++b) {
    CHECK(x[b * T] == 256);  // the window starts at the separator ...
    CHECK(y[b * T] != 256);  // ... so its first target is a document's first token
    ++firsts[y[b * T]];
  }
  CHECK(firsts.size() > 10);
  // Without a tokenizer end-of-text id (and no manifest), align: documents is refused.
  CHECK(contains(load_error(dir, "{shards: d, align: documents}", "byte"),
                 "documents starts windows at an end-of-text id, and neither the tokenizer nor the "
                 "shards' manifest has one"));

  // Consecutive windows: every token after a stream's first is a target exactly once, in
  // order, over the shards and over a plain token vector alike.
  for (bool shards : {true, false}) {
    ablate::TextData v;
    if (!shards) v.val = ids;
    const ablate::TextData& data = shards ? d : v;
    const int64_t n = shards ? 300 : static_cast<int64_t>(ids.size());
    const int64_t w = ablate::consecutive_windows(data, false, T);
    CHECK(w == (n - 1 + T - 1) / T);
    std::vector<int32_t> targets;
    const int64_t batch = 7;
    std::vector<int32_t> bx(batch * T), by(batch * T);
    for (int64_t first = 0; first < w; first += batch) {
      ablate::consecutive_batch(data, false, first, batch, T, bx.data(), by.data());
      for (int64_t i = 0; i < batch * T; ++i) {
        if (by[static_cast<size_t>(i)] >= 0) targets.push_back(by[static_cast<size_t>(i)]);
        else CHECK(bx[static_cast<size_t>(i)] == 0);
      }
    }
    CHECK(targets == std::vector<int32_t>(ids.begin() + 1, ids.begin() + n));
  }
}

TEST_CASE(
    "shards/a run from a nanoGPT train.bin and val.bin of a text's bytes is the run on the text, "
    "bitwise") {
  ablate::test::registry();
  ablate::test::TempDir dir;
  const std::string text =
      ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
  REQUIRE(text.size() > 10000);
  fs::copy_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt", dir.path / "text.txt");
  // The text data's split: 90% of the bytes, moved to a UTF-8 character boundary.
  size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * 0.9);
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
  fs::create_directories(dir.path / "nanogpt");
  write_shard(dir / "nanogpt/train.bin", bytes_as_ids(text.substr(0, cut)), true);
  write_shard(dir / "nanogpt/val.bin", bytes_as_ids(text.substr(cut)), true);
  const std::string a =
      dir.write("text.yaml", tiny_experiment("{path: text.txt, train_fraction: 0.9}"));
  const std::string b = dir.write("bin.yaml", tiny_experiment("{shards: nanogpt, format: raw}"));
  for (const auto& [cfg, out] :
       {std::pair{a, std::string("text")}, std::pair{b, std::string("bin")}}) {
    ablate::RunOptions ro;
    ro.out_dir = dir / out;
    ro.quiet = true;
    ablate::run_experiment(ablate::Experiment::load(cfg), ro);
  }
  check_same_training(dir / "text", dir / "bin");
  const auto run = ablate::read_run_file(ablate::run_file_path(dir / "bin"));
  CHECK(run.str_attrs.at("data_file") == (dir.path / "nanogpt").string());
  CHECK(run.str_attrs.at("status") == "done");
}

TEST_CASE(
    "shards/a run from llm.c shards killed mid-run resumes to the uninterrupted run, bitwise") {
  ablate::test::TempDir dir;
  const std::string text =
      ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
  fs::create_directories(dir.path / "sh");
  const size_t third = text.size() / 3;
  write_shard(dir / "sh/tiny_train_000001.bin", bytes_as_ids(text.substr(0, third)));
  write_shard(dir / "sh/tiny_train_000002.bin",
              bytes_as_ids(text.substr(third, 2 * third - third)));
  write_shard(dir / "sh/tiny_val_000000.bin", bytes_as_ids(text.substr(2 * third)));
  const std::string cfg =
      dir.write("run.yaml", tiny_experiment("{train: 'sh/*_train_*.bin', val: 'sh/*_val_*.bin'}"));
  const std::string bin = ablate::test::ablate_binary() + " run " + cfg + " -q -o ";
  auto r = ablate::test::run_command(bin + (dir / "full"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  // Killed (SIGKILL) at the 13th step, after the checkpoint of step 10; resumed from there.
  r = ablate::test::run_command("ABLATE_FAULT=step:13 " + bin + (dir / "cut"));
  REQUIRE_MESSAGE(r.status == 128 + 9, r.output);
  CHECK(ablate::read_checkpoint(ablate::checkpoint_path(dir / "cut")).ints.at("step") == 10);
  r = ablate::test::run_command(bin + (dir / "cut") + " --resume");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  check_same_training(dir / "full", dir / "cut");
}

TEST_CASE(
    "shards/train.eval_full scores every validation token once: the same val_loss whatever the "
    "batch size") {
  ablate::test::registry();
  ablate::test::TempDir dir;
  const std::string text =
      ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
  fs::create_directories(dir.path / "sh");
  write_shard(dir / "sh/t_train_000001.bin", bytes_as_ids(text.substr(0, 12000)));
  write_shard(dir / "sh/t_val_000000.bin",
              bytes_as_ids(text.substr(12000, 1000)));  // 999 targets: 32 windows, the last short
  write_shard(dir / "sh/t_val_000001.bin", bytes_as_ids(text.substr(13000, 500)));
  const std::string cfg = dir.write("full.yaml", tiny_experiment("{shards: sh}"));
  std::map<std::string, double> val;
  for (const char* v : {"b8", "b5", "sampled"}) {
    std::vector<std::string> over{"train.steps=1", "sample.tokens=0"};
    if (std::string(v) != "sampled") over.push_back("train.eval_full=true");
    over.push_back(std::string("train.batch_size=") + (std::string(v) == "b5" ? "5" : "8"));
    ablate::RunOptions ro;
    ro.out_dir = dir / v;
    ro.quiet = true;
    ablate::run_experiment(ablate::Experiment::load(cfg, over), ro);
    val[v] = ablate::read_run_file(ablate::run_file_path(dir / v))
                 .tables.at("eval")
                 .at("val_loss")
                 .front();  // step 0
  }
  CHECK(val["b8"] == doctest::Approx(val["b5"]).epsilon(1e-6));
  CHECK(val["b8"] != val["sampled"]);
  CHECK(val["b8"] ==
        doctest::Approx(std::log(256.0)).epsilon(0.05));  // untrained: about uniform over 256 bytes
  // Line windows have their own scoring: eval_full is refused with them.
  std::string lines;
  for (int i = 0; i < 500; ++i) lines += "line " + std::to_string(i) + "\n";
  dir.write("lines.txt", lines);
  const std::string lines_cfg =
      dir.write("lines.yaml", tiny_experiment("{path: lines.txt, windows: lines}"));
  const std::string e = error_of([&] {
    ablate::describe_experiment(ablate::Experiment::load(lines_cfg, {"train.eval_full=true"}));
  });
  CHECK(contains(e, "train.eval_full: scores consecutive windows of the token stream"));
}

TEST_CASE(
    "shards/bad data sections and bad shards are refused before training, naming what is wrong and "
    "the fix") {
  ablate::test::TempDir dir;
  fs::create_directories(dir.path / "ok");
  write_shard(dir / "ok/a_train_000001.bin", std::vector<int32_t>(100, 65));
  write_shard(dir / "ok/a_val_000000.bin", std::vector<int32_t>(100, 66));
  // A tokenizer fitted on text, with shards and no manifest.
  std::string e = load_error(dir, "{shards: ok}", "char");
  CHECK(contains(e, "the experiment's tokenizer is fitted on text, and token shards hold no text"));
  CHECK(contains(e, "ablate data prepare --tokenizer NAME"));
  // Text options with shards; shards with train/val; one of train/val.
  CHECK(contains(load_error(dir, "{shards: ok, windows: lines}", "byte"),
                 "data.windows: windows applies to a text file"));
  CHECK(contains(load_error(dir, "{shards: ok, train: 'ok/*train*'}", "byte"),
                 "give either shards: DIR"));
  CHECK(contains(load_error(dir, "{train: 'ok/*train*.bin'}", "byte"),
                 "need both data.train: GLOB and data.val: GLOB"));
  CHECK(contains(load_error(dir, "{train: 'ok/*train*.bin', val: 'ok/*nothing*.bin'}", "byte"),
                 "'ok/*nothing*.bin' matches no file"));
  CHECK(contains(load_error(dir, "{shards: absent}", "byte"), "directory 'absent' not found"));
  CHECK(contains(load_error(dir, "{shards: ok, format: numpy}", "byte"), "format"));
  // No validation shards in the directory.
  fs::create_directories(dir.path / "noval");
  write_shard(dir / "noval/a_train_000001.bin", std::vector<int32_t>(100, 65));
  e = load_error(dir, "{shards: noval}", "byte");
  CHECK(contains(e, "holds no validation shards (*val*.bin); its .bin files: a_train_000001.bin"));
  // A shard shorter than a window.
  CHECK(contains(load_error(dir, "{shards: ok}", "byte", 200),
                 "data.shards: no training shard holds a whole window (context + 1 = 201 tokens; "
                 "the largest has 100)"));
  // Ids at or above the tokenizer's vocabulary: the file, the first offset and id, the fix.
  fs::create_directories(dir.path / "big");
  std::vector<int32_t> ids(100, 65);
  ids[37] = 300;
  write_shard(dir / "big/a_train_000001.bin", ids);
  write_shard(dir / "big/a_val_000000.bin", std::vector<int32_t>(100, 66));
  e = load_error(dir, "{shards: big}", "byte");
  CHECK(contains(e,
                 "big/a_train_000001.bin: token 37 (byte offset 1098) is id 300, but the "
                 "vocabulary has 256 ids (0 to 255)"));
  CHECK(contains(e, "Use the tokenizer the shards were made with"));
  // A damaged shard: the format's message reaches the run.
  std::ofstream(dir.path / "ok/a_val_000001.bin", std::ios::binary) << std::string(1030, 'x');
  CHECK(contains(load_error(dir, "{shards: ok}", "byte"),
                 "a_val_000001.bin: not an llm.c token shard"));
}

TEST_CASE(
    "shards/a DataMemo maps shards once for experiments that share them, and again when a file "
    "changes") {
  ablate::test::TempDir dir;
  fs::create_directories(dir.path / "s");
  write_shard(dir / "s/a_train_000001.bin", std::vector<int32_t>(100, 65));
  write_shard(dir / "s/a_val_000000.bin", std::vector<int32_t>(50, 66));
  ablate::DataMemo memo;
  auto tok = tokenizer("byte");
  auto exp = ablate::Experiment::parse("data: {shards: s}", "test.yaml", dir.path.string());
  auto first =
      ablate::load_shared_text_data(exp.root().child("data"), dir.path.string(), *tok, "byte", 8);
  auto again =
      ablate::load_shared_text_data(exp.root().child("data"), dir.path.string(), *tok, "byte", 8);
  CHECK(first == again);
  write_shard(dir / "s/a_val_000000.bin", std::vector<int32_t>(60, 66));
  auto changed =
      ablate::load_shared_text_data(exp.root().child("data"), dir.path.string(), *tok, "byte", 8);
  CHECK(changed != first);
  CHECK(changed->tokens(false) == 60);
  CHECK(changed->sha256 != first->sha256);
  auto other_context =
      ablate::load_shared_text_data(exp.root().child("data"), dir.path.string(), *tok, "byte", 16);
  CHECK(other_context != changed);
}
